"""Issue 25: the scored model_new.py is one self-contained file KernelBench's loaders and static check accept,
and a kernel type is planned only where the patch routes a call of the model to it (the same matcher)."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from autokernel.engine.cuda_inline import cuda_text, inline_cuda
from autokernel.engine.kernel_patch import patch, routed_calls
from autokernel.engine.model_new import write_model_new
from autokernel.engine import routing
from autokernel.engine.routing import ROUTED, mark_routes, routable
from autokernel.engine.standalone import Part, combine
from autokernel.engine.static_check import static_problems

from problem_support import load_like_kernelbench

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = Path(__file__).parent / "kernelbench_problems" / "level1"
STARTER = ROOT / "kernels" / "{kind}" / "starter_{backend}.py"

# A problem of our own whose forward runs a softmax, then a row sum of an RMSNorm: three kept kernels in one
# file, whose starters share names (kernel_fn, MAX_FUSED_COLS, _warps) that must stay apart.
THREE_KINDS = '''"""Three kernel types in one forward: a forward pass that softmaxes, normalises and sums its rows."""
import torch
import torch.nn as nn

MAX_FUSED_COLS = 3  # the problem's own name, also a name the softmax and rmsnorm starters define


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-6)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        return self.norm(torch.softmax(x, dim=-1) * MAX_FUSED_COLS).sum(-1)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64]
'''


def _kept(tmp_path: Path, *kinds: str, backend: str = "triton") -> list[dict]:
    """Kernel files as the integration writes them (the starters), and their entries."""
    entries = []
    for kind in kinds:
        path = tmp_path / f"{kind}.py"
        path.write_text(Path(str(STARTER).format(kind=kind, backend=backend)).read_text())
        entries.append({"kind": kind, "candidate_id": f"{kind}-0001", "path": str(path), "backend": backend})
    return entries


def test_three_kernels_in_one_file_run_from_kernelbench_loader_with_nothing_beside(tmp_path):
    problem = tmp_path / "7_three_kinds.py"
    problem.write_text(THREE_KINDS)
    work = tmp_path / "integration"
    work.mkdir()
    path = write_model_new(work, problem, _kept(work, "softmax", "rmsnorm", "reduce"))
    text = path.read_text()
    assert static_problems(text, ["triton"]) == []
    for looked_up in ("__file__", "spec_from_file_location", "_load(", str(tmp_path)):  # try/except: static_problems
        assert looked_up not in text, looked_up
    assert text.count("@triton.jit") >= 3 and "verify=False" in text
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the loader sets no interpreter on a GPU box
    result = load_like_kernelbench(problem, path, device=device)  # from an empty folder, the file alone
    assert result["matched"] == result["trials"] == 2, result
    assert {k: result["calls"].get(k, 0) > 0 for k in ("softmax", "rmsnorm", "reduce")} == dict.fromkeys(
        ("softmax", "rmsnorm", "reduce"), True), result


def test_every_kernel_types_starter_inlined_passes_the_static_check(tmp_path):
    """A kept starter of any kernel type (a try/except around an import, say) must not make the file unsubmittable."""
    from autokernel.kernels import available

    path = write_model_new(tmp_path, PROBLEMS / "1_softmax.py", _kept(tmp_path, *available()))
    assert static_problems(path.read_text(), ["triton"]) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("problem,kind", [("1_softmax", "softmax"), ("2_rmsnorm", "rmsnorm"), ("3_row_sum", "reduce"),
                                          ("6_layernorm_3d", "layernorm")])
def test_on_a_gpu_the_one_file_builds_its_kernel_and_matches(tmp_path, problem, kind, backend):
    """The scored file as KernelBench runs it on a GPU: CUDA C++ through load_inline, Triton from a temp file."""
    source = PROBLEMS / f"{problem}.py"
    path = write_model_new(tmp_path, source, _kept(tmp_path, kind, backend=backend))
    assert static_problems(path.read_text(), [backend]) == []
    result = load_like_kernelbench(source, path, backend=backend, device="cuda")
    assert result["matched"] == result["trials"] == 2 and result["calls"].get(kind, 0) > 0, result


def test_no_kept_kernel_is_the_model_unchanged_and_still_one_file(tmp_path):
    path = write_model_new(tmp_path, PROBLEMS / "1_softmax.py", [])
    text = path.read_text()
    assert "No kernel was kept" in text and static_problems(text, []) == []
    assert "triton: no @triton.jit or @triton.autotune function" in static_problems(text, ["triton"])
    result = load_like_kernelbench(PROBLEMS / "1_softmax.py", path)
    assert result == {"matched": 2, "trials": 2, "calls": {}}


def test_the_static_check_rejects_what_kernelbench_rejects():
    good = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x):\n    tl.store(x, 1)\n"
    assert static_problems(good, ["triton"]) == []
    assert static_problems(good + "# a try: in a comment, then pass\n", ["triton"]) == []
    fallback = good + "def f():\n    try:\n        k[(1,)](0)\n    except RuntimeError:\n        return 0\n"
    assert static_problems(fallback, ["triton"]) == ["a try block (a way to fall back to PyTorch)",
                                                     "an except clause (a way to fall back to PyTorch)"]
    assert static_problems('"""the forward pass"""\n' + good, ["triton"])[0].startswith("the word `pass`")
    assert static_problems("import threading\n" + good, ["triton"]) == ["threads or processes"]
    assert static_problems("import torch\n", ["triton"]) == ["triton: no @triton.jit or @triton.autotune function",
                                                            "triton: no tl.* operation"]
    assert static_problems("x = 1\n", ["cuda"]) == ["cuda: no __global__ kernel", "cuda: no load_inline or cpp_extension build"]
    with pytest.raises(ValueError, match="unknown backend 'tilelang'"):
        static_problems(good, ["tilelang"])


def test_a_cuda_candidate_carries_its_source_for_load_inline(tmp_path):
    """The CUDA form of the same file: the .cu text (its headers written in) a string built by load_inline, no
    file looked up; KernelBench's exec loader (a bare dict) builds ModelNew (the build itself needs a GPU)."""
    entry = _kept(tmp_path, "reduce", backend="cuda")
    inlined = inline_cuda(Path(entry[0]["path"]).read_text(), entry[0]["path"])
    assert "__file__" not in inlined and "autokernel" not in inlined and "load_inline(" in inlined
    assert "#include \"ak_torch.cuh\"" not in inlined and "__global__" in inlined
    path = write_model_new(tmp_path, PROBLEMS / "3_row_sum.py", entry)
    text = path.read_text()
    assert static_problems(text, ["cuda"]) == []
    scope: dict = {}
    exec(compile(text, "<string>", "exec"), scope)  # KernelBench's loader for its CUDA backend
    model = scope["ModelNew"]()
    assert isinstance(model, scope["Model"]) and "reduce" in repr(model.kernel_stats)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.timeout(600)
def test_the_inlined_cuda_text_compiles_without_an_include_path(tmp_path):
    """The string load_inline gets: its kernels/include headers written in, comments out; nvcc compiles its
    device code for sm_90a with the library's flags less the include path (the torch binding needs a GPU box)."""
    from autokernel.kernels.cuda_build import INCLUDE_DIR, nvcc_flags

    text = cuda_text(ROOT / "kernels" / "reduce" / "reduce.cu", INCLUDE_DIR)
    assert '#include "' not in text and "//" not in text and "PYBIND11_MODULE" in text
    (tmp_path / "inline.cu").write_text(text)
    flags = [f for f in nvcc_flags("90") if not f.startswith("-I")]
    run = subprocess.run([shutil.which("nvcc"), *flags, "-std=c++17", "-DAUTOKERNEL_NO_TORCH", "-c", "inline.cu",
                          "-o", "inline.o"], cwd=tmp_path, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stderr[-3000:]


def test_clashing_names_are_kept_apart_and_references_follow():
    first = "N = 2\n\ndef kernel_fn(x):\n    return x * N\n\ndef scale(N=N):\n    return N\n"
    second = "N = 5\n\ndef kernel_fn(x):\n    def inner(N):\n        return N\n    return inner(x) + N + [N for N in (1,)][0]\n"
    parts = [Part("problem.py", "N = 7\n"), Part("a.py", first, "a_", ("kernel_fn",)), Part("b.py", second, "b_", ("kernel_fn",))]
    _, texts = combine(parts)
    scope: dict = {}
    exec("\n".join(texts), scope)
    assert scope["N"] == 7 and scope["a_kernel_fn"](1) == 2 and scope["scale"]() == 2 and scope["b_kernel_fn"](1) == 7
    assert parts[1].names["N"] == "a_N" and parts[2].names["kernel_fn"] == "b_kernel_fn"
    assert all(isinstance(ast.parse(t), ast.Module) for t in texts)


# -- plan and patch: one matcher ----------------------------------------------------------------------------
class _Sums(nn.Module):
    def forward(self, x):
        return x.sum(1)  # a reduce row in the profile, but not the kernel's contract (the last dim)


def test_routes_count_what_the_patch_will_take():
    ln3 = nn.LayerNorm((4, 8, 16))
    assert routed_calls(ln3, [torch.randn(2, 4, 8, 16)])["layernorm"] == 1  # several trailing dims: flattened
    assert routed_calls(_Sums(), [torch.randn(4, 5, 6)])["reduce"] == 0
    counts = routed_calls(_Mixed(), [torch.randn(3, 6)])
    assert counts["reduce"] == 2 and counts["softmax"] == 1 and counts["layernorm"] == 0

    assert routing.routed_calls(_Sums(), [torch.randn(4)]) is None  # the probe failed: nothing known, no row marked
    assert mark_routes([{"kind": "reduce"}], None) == [{"kind": "reduce"}]
    rows = mark_routes([{"kind": "reduce"}, {"kind": "softmax"}, {"kind": "other"}],
                       routed_calls(_Sums(), [torch.randn(4, 5, 6)]))
    assert rows[0][ROUTED] == 0 and rows[1][ROUTED] == 0 and ROUTED not in rows[2]
    lines = []
    plan = [{"kind": "reduce", "row": 0}, {"kind": "matmul", "row": 2}]
    assert routable(plan, rows, lines.append) == [{"kind": "matmul", "row": 2}]  # never probed: kept
    assert lines == ["skipping reduce: no call of the model's forward matches a reduce kernel's contract (the patch "
                     "would route none to it), so a kernel found for it could not be used"]


class _Mixed(nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1).sum(-1) + torch.sum(x, dim=-1) + nn.functional.layer_norm(x, (6,)).mean(-1)


def test_a_layernorm_over_three_dims_runs_the_row_kernel_exactly():
    ln = nn.LayerNorm((4, 8, 16))
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    x = torch.randn(3, 4, 8, 16)
    ref = ln(x)
    seen = []

    def rows_kernel(x2d, w, b, eps=1e-5):  # what the layernorm kernel computes: rows of x2d, w and b 1-D
        seen.append((tuple(x2d.shape), tuple(w.shape), tuple(b.shape)))
        return nn.functional.layer_norm(x2d, (x2d.shape[1],), w, b, eps)

    stats = patch(ln, {"layernorm": rows_kernel}, verify=False)
    with torch.no_grad():  # a call that needs a gradient is left to PyTorch (a kernel has no backward)
        out = ln(x)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    assert seen == [((3, 512), (512,), (512,))] and stats.calls["layernorm"] == 1
