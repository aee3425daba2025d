"""The Triton starters share one helper module (kernels/triton_common.py) instead of carrying copies, and
what must stand alone still does: an exported package gets a copy of the module (its import rewritten), a
one-file KernelBench ModelNew gets the module's code where the starter imports it."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.engine.model_new import write_model_new
from autokernel.engine.standalone import inline_triton_common
from autokernel.engine.static_check import static_problems
from autokernel.kernels import get_spec

from problem_support import load_like_kernelbench

PROBLEMS = Path(__file__).parent / "kernelbench_problems" / "level1"
IMPORT = "from autokernel.kernels.triton_common import "
# The starters that import the shared helpers, and the copies they no longer carry.
SHARING = {
    "softmax": ("def _exp(", "def _tma_ready("),
    "cross_entropy": ("def _exp(", "def _tma_ready("),
    "rmsnorm": ("def _num_sms(", "def _tma_ready("),
    "layernorm": ("def _num_sms(", "def _tma_ready("),
    "reduce": ("def _num_sms(",),
    "matmul": ("def _span(", "def _tma_ready("),
    "fused_mlp": ("def _span(", "def _grouped("),
}
# Rows narrow, wide enough to loop, and few and wide enough to be split (the interpreter has 4 SMs).
ROW_SHAPES = [{"rows": 5, "cols": 37}, {"rows": 3, "cols": 1500}, {"rows": 2, "cols": 20000}]
SMALL_SHAPES = {
    "softmax": ROW_SHAPES, "rmsnorm": ROW_SHAPES, "layernorm": ROW_SHAPES, "reduce": ROW_SHAPES,
    "cross_entropy": [{"rows": 5, "vocab": 37}, {"rows": 3, "vocab": 9000}],
    "matmul": [{"M": 33, "N": 17, "K": 40}],
    "fused_mlp": [{"tokens": 9, "hidden": 32, "intermediate": 48}],
}


def _text(kind: str) -> str:
    return get_spec(kind).starters["triton"].read_text()


def _autokernel_imports(source: str) -> list[str]:
    tree = ast.parse(source)
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    return [name for name in names if name.split(".")[0] == "autokernel"]


@pytest.mark.parametrize("kind", sorted(SHARING))
def test_a_starter_imports_the_shared_helpers_in_one_line_and_keeps_no_copy(kind):
    text = _text(kind)
    assert sum(line.startswith(IMPORT) for line in text.splitlines()) == 1
    assert _autokernel_imports(text) == ["autokernel.kernels.triton_common"]
    assert [copy for copy in SHARING[kind] if copy in text] == []


def test_the_shared_module_imports_only_torch_and_triton():
    from autokernel.kernels import triton_common

    tree = ast.parse(Path(triton_common.__file__).read_text())
    imported = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert imported <= {"functools", "torch", "triton"}


def test_the_starters_split_rule_is_the_shared_one_with_their_constants():
    """A starter's public `split_plan` keeps its signature and answers from its own SPLIT_* knobs."""
    from template_is_starter import starter_module

    for kind in ("rmsnorm", "layernorm", "reduce"):
        starter = starter_module(kind)
        assert starter.split_plan(2, 1 << 20, 132) is not None and starter.split_plan(1024, 1 << 20, 132) is None
        starter.SPLIT_ROWS = 0  # the module constant is read at each call
        assert starter.split_plan(2, 1 << 20, 132) is None, kind


def test_every_sharing_starter_matches_its_reference_under_the_interpreter():
    from test_playbook import _check_under_interpreter

    jobs = [(kind, kind, [{}], False, SMALL_SHAPES[kind]) for kind in sorted(SHARING)]
    assert _check_under_interpreter(jobs, timeout=900) == {kind: [] for kind in SHARING}


def test_inlining_keeps_the_sources_own_names_and_the_imports_aliases(tmp_path):
    source = ("import torch\n"
              "from autokernel.kernels.triton_common import span as reach, num_sms\n\n"
              "def tma_ready():\n    return 'mine'\n\n"
              "def kernel_fn(t):\n    return reach(t), num_sms(t.device), tma_ready()\n")
    inlined = inline_triton_common(source)
    assert _autokernel_imports(inlined) == [] and "def tma_ready():\n    return 'mine'" in inlined
    (tmp_path / "inlined.py").write_text(inlined)  # @triton.jit reads its function's source from the file
    spec = importlib.util.spec_from_file_location("inlined", tmp_path / "inlined.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch

    assert module.kernel_fn(torch.empty(3, 5)) == (2 * 5 + 4, 4, "mine")
    assert inline_triton_common("import torch\n") == "import torch\n"


# An exported package is imported where autokernel cannot be, its kernel run under the interpreter.
EXPORTED = '''
import sys
sys.meta_path.insert(0, type("NoAutokernel", (), {"find_spec": staticmethod(
    lambda name, *a: (_ for _ in ()).throw(ImportError("autokernel is off limits")) if name.startswith("autokernel") else None)})())
import torch
import exported_softmax
x = torch.randn(6, 300)
y = exported_softmax.KERNELS["softmax"]["module"].kernel_fn(x)
assert torch.allclose(y, torch.softmax(x, dim=-1), atol=1e-5), (y - torch.softmax(x, dim=-1)).abs().max()
assert not [k for k in sys.modules if k.startswith("autokernel")]
print("ok")
'''


def test_an_exported_starter_carries_the_shared_module_and_runs_without_autokernel(tmp_path, monkeypatch):
    from autokernel.engine.session import OptimizeSession, SessionConfig
    from autokernel.engine.store import Store

    from loop_doubles import FakeWorker, ScriptedAgent, fake_profiler, fake_source, install_fake_specs
    from test_export import MODEL, _with_source

    install_fake_specs(monkeypatch, tmp_path, kinds=("softmax",))
    (tmp_path / "model.py").write_text(MODEL)
    agent = ScriptedAgent(moves=[("real", [(0.5, "")])])
    agent.propose = _with_source(agent.propose, fake_source(0.5, tag="real") + _text("softmax"))
    store = Store(tmp_path / "s.db")
    cfg = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, plateau=3)
    OptimizeSession(cfg, store, agent=agent, worker=FakeWorker(), profiler=fake_profiler(("softmax",))).run()
    out = tmp_path / "pkgs" / "exported_softmax"
    done = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "export", "latest", "--db",
                           str(tmp_path / "s.db"), "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    kernel = (out / "softmax.py").read_text()
    assert (out / "_triton_common.py").is_file() and _autokernel_imports(kernel) == []
    assert "from ._triton_common import " in kernel
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(out.parent), TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", EXPORTED], capture_output=True, text=True, timeout=300, env=env,
                         cwd=str(tmp_path))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_a_one_file_model_new_has_the_shared_code_written_in_and_loads_alone(tmp_path):
    """Two kept starters that both import the shared module: the file imports no autokernel, passes
    KernelBench's static check and runs from an empty folder."""
    problem = PROBLEMS / "2_rmsnorm.py"
    entries = []
    for kind in ("rmsnorm", "softmax"):
        path = tmp_path / f"{kind}.py"
        path.write_text(_text(kind))
        entries.append({"kind": kind, "candidate_id": f"{kind}-0001", "path": str(path), "backend": "triton"})
    text = write_model_new(tmp_path, problem, entries).read_text()
    assert _autokernel_imports(text) == [] and "triton_common" not in text
    assert static_problems(text, ["triton"]) == []
    result = load_like_kernelbench(problem, tmp_path / "model_new.py")
    assert result["matched"] == result["trials"] == 2 and result["calls"].get("rmsnorm", 0) > 0, result
