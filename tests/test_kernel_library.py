"""The Triton kernel library: every starter is correct, stable and repeatable; the specs are sound.

On a machine without a GPU the starters run under Triton's interpreter (TRITON_INTERPRET=1 is set
before they are imported), on the small shapes of each spec. Results are compared with the spec's
reference evaluated in float64, within the spec's tolerance for the dtype.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from autokernel.kernels import get_spec
from autokernel.kernels.spec import INPUT_MODES, noncontiguous_like

MY_KERNELS = ("cross_entropy", "layernorm", "reduce", "rotary_embedding", "matmul", "fused_mlp", "flash_attention")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Problem sizes the interpreter gets through in well under a second per call.
CPU_ELEMENT_LIMIT = {"matmul": 300_000, "fused_mlp": 300_000, "flash_attention": 120_000}
CPU_DEFAULT_LIMIT = 70_000
L2_BYTES = 50 * 1024 * 1024


def _small_shapes(spec):
    limit = CPU_ELEMENT_LIMIT.get(spec.name, CPU_DEFAULT_LIMIT) if DEVICE == "cpu" else float("inf")
    shapes = [spec.smoke_shape, *spec.edge_shapes, *spec.sweep_shapes]
    return [s for s in shapes if spec.elements(s) <= limit]


@pytest.fixture(scope="module")
def starters():
    """Each type's Triton starter, imported the way a worker does (interpreter flag set first on CPU)."""
    with pytest.MonkeyPatch.context() as mp:
        if DEVICE == "cpu":
            mp.setenv("TRITON_INTERPRET", "1")
        loaded = {}
        for name in MY_KERNELS:
            path = get_spec(name).starters["triton"]
            module_spec = importlib.util.spec_from_file_location(f"starter_triton_{name}", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            loaded[name] = module.kernel_fn
        yield loaded


def _in_float64(args):
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def _check_close(spec, dtype, out, args, mode, where):
    ref = spec.reference(*_in_float64(args))
    assert out.shape == ref.shape, f"{where}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert out.dtype == spec.reference(*args).dtype, f"{where}: dtype {out.dtype}"
    atol, rtol = spec.tolerance(dtype)
    if mode != "normal":  # scaled regimes: the absolute tolerance scales with the answer
        atol *= max(1.0, float(ref.abs().max()))
    err = (out.double() - ref).abs()
    bad = ~(err <= atol + rtol * ref.abs())  # NaN counts as bad
    assert not bool(bad.any()), f"{where}: max abs error {float(err.max()):.3g} (atol {atol:.3g}, rtol {rtol})"


@pytest.mark.parametrize("name", MY_KERNELS)
def test_starter_matches_reference_on_small_sweep_and_edge_shapes(starters, name):
    spec, kernel_fn = get_spec(name), starters[name]
    gen = torch.Generator().manual_seed(1)
    shapes = _small_shapes(spec)
    assert len(shapes) >= 4, "the CPU run must cover the smoke shape and several edge/sweep shapes"
    for shape in shapes:
        for dtype in spec.dtypes:
            args = spec.make_inputs(shape, dtype, DEVICE, gen, "normal")
            _check_close(spec, dtype, kernel_fn(*args), args, "normal", f"{name} {shape} {dtype}")


@pytest.mark.parametrize("name", MY_KERNELS)
def test_starter_handles_noncontiguous_inputs(starters, name):
    spec, kernel_fn = get_spec(name), starters[name]
    gen = torch.Generator().manual_seed(2)
    for dtype in spec.dtypes:
        args = spec.make_inputs(spec.smoke_shape, dtype, DEVICE, gen, "normal")
        args = tuple(noncontiguous_like(a) if i in spec.data_args else a for i, a in enumerate(args))
        assert any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args)
        _check_close(spec, dtype, kernel_fn(*args), args, "normal", f"{name} non-contiguous {dtype}")


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the interpreter's numpy exp of -g, silu's far tail
@pytest.mark.parametrize("name", MY_KERNELS)
def test_starter_is_stable_in_every_input_regime(starters, name):
    spec, kernel_fn = get_spec(name), starters[name]
    gen = torch.Generator().manual_seed(3)
    for mode in INPUT_MODES:
        for dtype in spec.dtypes:
            args = spec.make_inputs(spec.smoke_shape, dtype, DEVICE, gen, mode)
            out = kernel_fn(*args)
            assert bool(torch.isfinite(out).all()), f"{name} {mode} {dtype}: non-finite output"
            _check_close(spec, dtype, out, args, mode, f"{name} {mode} {dtype}")


@pytest.mark.parametrize("name", MY_KERNELS)
def test_starter_is_bitwise_repeatable_and_leaves_inputs_alone(starters, name):
    spec, kernel_fn = get_spec(name), starters[name]
    gen = torch.Generator().manual_seed(4)
    shape = max(_small_shapes(spec), key=spec.elements)
    args = spec.make_inputs(shape, torch.bfloat16, DEVICE, gen, "normal")
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    outs = [kernel_fn(*args) for _ in range(3)]
    for out in outs[1:]:
        assert torch.equal(out.view(torch.int16) if out.dtype == torch.bfloat16 else out,
                           outs[0].view(torch.int16) if outs[0].dtype == torch.bfloat16 else outs[0])
    for a, b in zip(args, before):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), f"{name} changed an input"


@pytest.mark.parametrize("name", MY_KERNELS)
def test_spec_is_complete_and_consistent(name):
    spec = get_spec(name)
    assert spec.name == name and spec.signature.startswith("kernel_fn(")
    assert "triton" in spec.backends and spec.starters["triton"].name == "starter_triton.py"
    assert set(spec.tolerances) == set(spec.dtypes) == {torch.float32, torch.float16, torch.bfloat16}
    assert spec.metric == ("TFLOP/s" if name in ("matmul", "fused_mlp", "flash_attention") else "GB/s")
    assert spec.forbidden_ops or name == "rotary_embedding"
    assert all(op.startswith("aten::") for op in spec.forbidden_ops)
    # Sizes that are not powers of two in the sweep, sizes of 1 among the edge shapes.
    ints = lambda s: [v for v in s.values() if not isinstance(v, bool)]
    assert any(v & (v - 1) for s in spec.sweep_shapes for v in ints(s))
    assert any(1 in ints(s) for s in spec.edge_shapes)
    # Bench shapes spill out of H100's 50 MB L2 even in bf16, so bandwidth is DRAM bandwidth.
    for shape in spec.bench_shapes:
        assert spec.bytes_moved(shape, torch.bfloat16) > L2_BYTES, shape
        assert spec.flops(shape, torch.bfloat16) > 0
    # shape_from_args inverts make_inputs (small shapes; big ones would allocate gigabytes).
    gen = torch.Generator().manual_seed(5)
    for shape in [spec.smoke_shape, *spec.edge_shapes]:
        args = spec.make_inputs(shape, torch.float32, "cpu", gen, "normal")
        assert dict(spec.shape_from_args(*args)) == dict(shape)


def test_shape_tables_cover_llm_scale():
    vocabs = {s["vocab"] for s in get_spec("cross_entropy").sweep_shapes}
    assert {32000, 50257, 128256} <= vocabs
    attention = get_spec("flash_attention")
    assert {64, 128} <= {s["head_dim"] for s in attention.sweep_shapes}
    assert {True, False} == {s["causal"] for s in attention.sweep_shapes} == {s["causal"] for s in attention.bench_shapes}
    assert {"M": 4096, "N": 4096, "K": 4096} in get_spec("matmul").bench_shapes
    assert {"M": 8192, "N": 8192, "K": 8192} in get_spec("matmul").bench_shapes


def test_flop_counts_follow_the_definitions():
    assert get_spec("matmul").flops({"M": 3, "N": 5, "K": 7}, torch.float16) == 2 * 3 * 5 * 7
    mlp = {"tokens": 4, "hidden": 8, "intermediate": 16}
    assert get_spec("fused_mlp").flops(mlp, torch.float16) == 3 * 2 * 4 * 8 * 16
    att = {"batch": 2, "heads": 3, "seq": 10, "head_dim": 64, "causal": False}
    full = get_spec("flash_attention").flops(att, torch.float16)
    assert full == 4 * 2 * 3 * 10 * 10 * 64
    assert get_spec("flash_attention").flops({**att, "causal": True}, torch.float16) == full // 2


def test_cross_entropy_targets_are_real_classes():
    spec = get_spec("cross_entropy")
    logits, targets = spec.make_inputs({"rows": 500, "vocab": 7}, torch.float16, "cpu", torch.Generator().manual_seed(6), "normal")
    assert targets.dtype == torch.int64 and int(targets.min()) >= 0 and int(targets.max()) < 7
    assert spec.reference(logits, targets).dtype == torch.float32 and spec.reference(logits, targets).dim() == 0


def _autokernel(*argv):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "autokernel.engine.cli", *argv],
                          capture_output=True, text=True, timeout=120, env=env)


def test_kernels_command_lists_types_as_json():
    done = _autokernel("kernels", "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    by_name = {k["name"]: k for k in listed}
    assert set(MY_KERNELS) <= set(by_name)
    for entry in listed:
        assert set(entry) == {"name", "backends", "signature", "metric"}
        assert entry["metric"] in ("GB/s", "TFLOP/s")
    assert "triton" in by_name["matmul"]["backends"]
    assert by_name["cross_entropy"]["signature"] == "kernel_fn(logits, targets)"
    assert by_name["flash_attention"]["metric"] == "TFLOP/s" and by_name["reduce"]["metric"] == "GB/s"


def test_kernels_command_prints_a_table():
    done = _autokernel("kernels")
    assert done.returncode == 0, done.stderr
    for name in MY_KERNELS:
        assert name in done.stdout
    assert "kernel_fn(x, weight, bias, eps=1e-5)" in done.stdout
