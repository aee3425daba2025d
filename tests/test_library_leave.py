"""A whole-problem candidate may leave a convolution or a GEMM to the library (cuDNN, cuBLAS), as KernelBench
allows and torch.compile does, only for part of a problem: its own kernels must compute the rest, and a
problem that is nothing but the library op gets no such leave (engine/problem_spec.py `library_leave`)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from autokernel.engine.problem_spec import LIBRARY_OPS, library_leave
from autokernel.engine.worker import Worker

from problem_support import inductor_seeds

CONV_BIAS_RELU = Path(__file__).parent / "kernelbench_problems" / "level2" / "6_conv_bias_relu.py"

HEADER = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _bias_relu(y_ptr, b_ptr, out_ptr, n, hw, channels, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    y = tl.load(y_ptr + offs, mask=ok)
    b = tl.load(b_ptr + (offs // hw) % channels, mask=ok)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=ok)


def _epilogue(y, bias):
    out = torch.empty_like(y)
    n = y.numel()
    _bias_relu[(triton.cdiv(n, 256),)](y, bias, out, n, y.shape[2] * y.shape[3], y.shape[1], BLOCK=256)
    return out
'''

FUSED = HEADER + '''

class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)

    def forward(self, x):
        return _epilogue(F.conv2d(x, self.conv.weight, self.conv.bias), self.bias)
'''

TORCH_RELU = FUSED.replace("return _epilogue(F.conv2d(x, self.conv.weight, self.conv.bias), self.bias)",
                           "return torch.relu(_epilogue(F.conv2d(x, self.conv.weight, self.conv.bias), self.bias))")

CONV_ONLY = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return []
'''

CONV_AND_COPY = HEADER + '''

@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        out = torch.empty_like(y)
        _copy[(triton.cdiv(y.numel(), 256),)](y, out, y.numel(), BLOCK=256)
        return out
'''


def test_the_leave_covers_library_ops_only_where_the_problem_has_other_work():
    assert library_leave(["convolution", "add", "relu"]) == LIBRARY_OPS
    assert library_leave(["mm", "view", "leaky_relu"]) == LIBRARY_OPS
    assert library_leave(["convolution", "view", "empty"]) == frozenset()  # the conv is the whole problem
    assert library_leave(["addmm", "mm"]) == frozenset()


def _check(tmp_path, source: str, problem: Path):
    path = tmp_path / "model_new.py"
    path.write_text(textwrap.dedent(source))
    with Worker(device="cpu") as w:
        return w.check(str(path), kernel="problem", problem=str(problem), size="small")


@pytest.mark.parametrize("source, verdict", [
    (FUSED, None),  # cuDNN's conv through torch, the bias and ReLU in its own kernel
    (TORCH_RELU, "aten::relu"),  # part of the epilogue is torch's, not its own
], ids=["conv-then-own-epilogue", "conv-then-torch-relu"])
def test_a_conv_problems_candidate_may_call_the_conv_but_must_compute_the_rest(tmp_path, source, verdict):
    report = _check(tmp_path, source, CONV_BIAS_RELU)
    stages = [(s.name, s.status, s.detail) for s in report.stages]
    if verdict is None:
        assert report.passed, stages
    else:
        assert not report.passed and verdict in stages[0][2], stages


def test_a_problem_that_is_only_a_conv_gets_no_leave(tmp_path):
    problem = tmp_path / "conv_only.py"
    problem.write_text(textwrap.dedent(CONV_ONLY))
    report = _check(tmp_path, CONV_AND_COPY, problem)
    first = report.stages[0]
    assert not report.passed and "aten::convolution" in first.detail, (first.name, first.status, first.detail)


def test_a_seed_keeps_the_conv_a_library_call_only_where_the_problem_does_more(tmp_path):
    """As torch.compile on a GPU: cuDNN's conv and Inductor's Triton for the biases and ReLU, and that seed passes
    the harness; a problem that is only a conv gets the conv in Triton (im2col and a tl.dot matmul)."""
    (seed,) = inductor_seeds([CONV_BIAS_RELU], tmp_path / "seed.py")
    assert seed["extern"] == ["convolution"] and seed["kernels"]
    # as Inductor lowers it for a GPU: the conv's own bias is left out of the library call and added in Triton
    calls = re.findall(r"torch\.convolution\(.*\)", Path(seed["seed"]).read_text())
    assert len(calls) == 1 and "bias=None" in calls[0], calls
    with Worker(device="cpu") as w:
        report = w.check(seed["seed"], kernel="problem", problem=str(CONV_BIAS_RELU), size="small")
    assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]

    problem = tmp_path / "conv_only.py"
    problem.write_text(textwrap.dedent(CONV_ONLY))
    (alone,) = inductor_seeds([problem], tmp_path / "alone.py")
    assert alone["extern"] == [] and "tl.dot(" in Path(alone["seed"]).read_text()


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("transposed", [False, True])
def test_the_seeds_convolution_lowering_is_aten_convolution(dims, transposed):
    """Grouped, strided, padded, dilated, transposed (with output padding), in 1, 2 and 3 dims: the im2col and
    matmul form the seed hands Inductor computes what aten's convolution does."""
    import torch

    from autokernel.engine.inductor_seed import _conv_as_matmul

    torch.manual_seed(0)
    for groups, stride, padding, dilation in [(1, 1, 0, 1), (2, 2, 1, 1), (2, 3, 1, 2), (1, 1, 2, 3)]:
        x = torch.randn(2, 4, *[7, 6, 5][:dims], dtype=torch.float64)
        kernel = [3, 2, 3][:dims]
        weight = torch.randn(*((4, 6 // groups) if transposed else (6, 4 // groups)), *kernel, dtype=torch.float64)
        bias = torch.randn(6, dtype=torch.float64)
        out_pad = [min(stride, dilation) - 1 if transposed and stride > 1 else 0] * dims
        args = (x, weight, bias, [stride] * dims, [padding] * dims, [dilation] * dims, transposed, out_pad, groups)
        want = torch.ops.aten.convolution(*args)
        got = _conv_as_matmul(*args)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-9), (groups, stride, padding, dilation)


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("transposed", [False, True])
def test_a_depthwise_convolution_is_lowered_without_a_matrix_product(dims, transposed):
    """One input channel per group (depthwise, with a channel multiplier of 2): a multiply-and-sum over the
    window, which is what aten's convolution computes there."""
    import torch

    from autokernel.engine.inductor_seed import _conv_as_matmul

    torch.manual_seed(0)
    x = torch.randn(2, 4, *[7, 6, 5][:dims], dtype=torch.float64)
    kernel = [3, 2, 3][:dims]
    weight = torch.randn(*((4, 2) if transposed else (8, 1)), *kernel, dtype=torch.float64)
    for stride, padding, dilation in [(1, 0, 1), (2, 1, 2)]:
        out_pad = [1 if transposed and stride > 1 else 0] * dims
        args = (x, weight, None, [stride] * dims, [padding] * dims, [dilation] * dims, transposed, out_pad, 4)
        want = torch.ops.aten.convolution(*args)
        got = _conv_as_matmul(*args)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-9), (stride, padding, dilation)


def test_a_seed_that_would_leave_the_whole_problem_to_the_library_is_refused(tmp_path, monkeypatch):
    """Where the conv stays a library call although it is all the problem computes (here: a lowering that
    declines), the harness would refuse the seed; it is refused as it is made, with the reason."""
    import torch

    import autokernel.engine.inductor_seed as seeding

    monkeypatch.setattr(seeding, "_conv_as_matmul", lambda *args: NotImplemented)
    problem = tmp_path / "conv_only.py"
    # The conv, then a copy into another layout: Inductor writes a Triton kernel for the copy, which moves data
    # and computes nothing.
    problem.write_text(textwrap.dedent(CONV_ONLY).replace("return self.conv(x)",
                                                          "return self.conv(x).transpose(1, 2).contiguous()"))
    namespace: dict = {}
    exec(compile(problem.read_text(), str(problem), "exec"), namespace)
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    with pytest.raises(seeding.SeedError, match="leaves the problem's convolution to the library"):
        seeding.write_seed(problem, model, namespace["get_inputs"]())


def test_a_matrix_vector_product_is_seeded_as_a_triton_reduction(tmp_path):
    """Inductor's Triton matmul takes no dimension of 1 and leaves a GEMV to the library (a seed with nothing
    of its own); the seed writes it as a multiply-and-sum reduction, which computes what matmul does."""
    import os
    import subprocess
    import sys

    import torch

    from autokernel.engine.inductor_seed import _vector_product_as_reduction

    a, v = torch.randn(8, 32, dtype=torch.float64), torch.randn(32, 1, dtype=torch.float64)
    for x, y in [(a, v), (v.T, a.T), (a[:, :1], v.T)]:  # matrix-vector, vector-matrix, outer
        assert torch.allclose(_vector_product_as_reduction(x, y), x @ y)
    assert _vector_product_as_reduction(a, a.T) is NotImplemented  # a GEMM stays Inductor's matmul

    problem = tmp_path / "gemv.py"
    problem.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, a, b):
                return torch.matmul(a, b)


        def get_inputs():
            return [torch.randn(16, 256), torch.randn(256, 1)]


        def get_init_inputs():
            return []
    """))
    (seed,) = inductor_seeds([problem], tmp_path / "seed.py")
    assert seed["extern"] == [] and seed["kernels"]
    compare = textwrap.dedent(f"""
        import importlib.util, torch
        spec = importlib.util.spec_from_file_location("seed", {seed['seed']!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        a, b = module.get_inputs()
        print(torch.allclose(module.ModelNew()(a, b), a @ b, atol=1e-4, rtol=1e-4))
    """)
    ran = subprocess.run([sys.executable, "-c", compare], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert ran.stdout.strip().splitlines()[-1:] == ["True"], ran.stderr[-2000:]


def test_a_constant_the_forward_makes_is_a_buffer_of_the_seed_not_a_copy_per_call(tmp_path):
    """`torch.tensor(0.0, device=x.device)` in the forward is a constant to Inductor: the seed makes it once, as
    a buffer that moves with the module, so its forward makes no host-to-device copy (refused on a GPU)."""
    problem = tmp_path / "conv_min.py"
    problem.write_text(textwrap.dedent(CONV_ONLY).replace(
        "return self.conv(x)", "return torch.min(self.conv(x), torch.tensor(0.0, device=x.device))"))
    (seed,) = inductor_seeds([problem], tmp_path / "seed.py")
    source = Path(seed["seed"]).read_text()
    forward = source[source.index("    def forward(self, *inputs):"):]
    assert "self._seed_constant_0" in forward and ".to(" not in forward and "_CONSTANTS" not in forward
    with Worker(device="cpu") as w:
        report = w.check(seed["seed"], kernel="problem", problem=str(problem), size="small")
    assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]
