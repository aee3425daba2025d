"""The whole-problem target: a KernelBench problem with no known kernel type, solved by an LLM's complete
`ModelNew`. The problem's spec (engine/problem_spec.py), hand-written whole-problem candidates through the
real worker (good ones pass the five stages, bad ones fail where they should), the prompt and the answer
checks, and `autokernel kernelbench --agent MODEL --api-base URL` end to end against the scripted server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autokernel.engine import events as ev
from autokernel.engine.agents.base import AgentContext
from autokernel.engine.agents.llm_answers import check_source
from autokernel.engine.agents.prompts import build_prompt
from autokernel.engine.problem_spec import MODEL_SEED, SIGNATURE, problem_brief, problem_spec
from autokernel.engine.store import Store
from llm_support import llm_server  # noqa: F401  (a fixture)

CUMSUM = Path(__file__).parent / "kernelbench_problems" / "level1" / "4_cumsum.py"

GOOD_CUMSUM = '''import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + offs, tl.cumsum(x, axis=0).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.unused = torch.nn.Parameter(torch.randn(4) * 2)  # torch ops at construction are not the result

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n_cols = x.shape[-1]
        _cumsum_rows[(x.numel() // n_cols,)](x, y, n_cols, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return y
'''
BAD = {
    "calls_the_reference": (GOOD_CUMSUM.replace("        return y\n", "        return torch.cumsum(x, dim=-1)\n"),
                            "calls the reference op aten::cumsum"),
    "wrong_result": (GOOD_CUMSUM.replace("tl.cumsum(x, axis=0)", "(tl.cumsum(x, axis=0) * 1.5)"), "max abs error"),
    # Within 1e-2 of the exact answer, not within KernelBench's 1e-4 (float32) of Model's own: refused, as
    # KernelBench would refuse it.
    "off_by_kernelbench_rule": (GOOD_CUMSUM.replace("tl.cumsum(x, axis=0)", "(tl.cumsum(x, axis=0) * 1.003)"),
                                "against the reference in its own dtype: max abs error"),
    "mutates_its_input": (GOOD_CUMSUM.replace("        x = x.contiguous()\n", "").replace(
        "        return y\n", "        x.zero_()\n        return y\n"), "ModelNew modified its input argument 0"),
    "adds_in_pytorch": (GOOD_CUMSUM.replace("        return y\n", "        return y + 0.0\n"),
                        "computes with PyTorch ops (aten::add)"),
    "raises": (GOOD_CUMSUM.replace("        return y\n", "        raise ValueError('no')\n"), "ModelNew raised ValueError"),
}


def test_the_problem_spec_judges_with_the_problems_model(monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_MODEL_SIZE", "small")
    spec = problem_spec(CUMSUM, "cpu", "small")
    assert spec.name == "problem" and spec.entry == "ModelNew" and spec.dtypes == (torch.float32,)
    assert spec.tolerance(torch.float32) == (1e-2, 1e-2) and "cumsum" in spec.forbidden_ops
    a = spec.make_inputs({"draw": 1}, torch.float32, "cpu", torch.Generator().manual_seed(1), "normal")
    b = spec.make_inputs({"draw": 1}, torch.float32, "cpu", torch.Generator().manual_seed(2), "normal")
    assert a[0].shape == (16, 128) and not torch.equal(a[0], b[0])  # fresh get_inputs() draws
    large = spec.make_inputs({"draw": 1}, torch.float32, "cpu", torch.Generator().manual_seed(1), "large")
    assert torch.allclose(large[0], a[0] * 1e3)
    ref = spec.reference(a[0].double())
    assert ref.dtype == torch.float64 and torch.allclose(ref, a[0].double().cumsum(-1))
    assert spec.reference(*a).dtype == torch.float32  # what the output dtype must be
    assert problem_spec(CUMSUM, "cpu", "small") is spec  # built once per worker
    brief = problem_brief(CUMSUM)
    assert brief.signature == SIGNATURE and "torch.cumsum" in brief.source and not brief.starters


def test_whole_problem_candidates_in_the_real_worker(tmp_path):
    from autokernel.engine.worker import Worker

    for name, (source, _) in {"good": (GOOD_CUMSUM, ""), **BAD}.items():
        (tmp_path / f"{name}.py").write_text(source)
    with Worker(device="cpu") as w:
        report = w.check(str(tmp_path / "good.py"), kernel="problem", problem=str(CUMSUM), size="small")
        assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]
        assert report.stages[-1].detail.startswith("skipped: ")
        (record,) = w.bench(str(tmp_path / "good.py"), kernel="problem", shapes=[{}], dtype="fp32",
                            problem=str(CUMSUM), size="small")
        assert record.kernel_ms > 0 and record.eager_ms > 0 and not record.meaningful
        for name, (_, reason) in BAD.items():
            report = w.check(str(tmp_path / f"{name}.py"), kernel="problem", problem=str(CUMSUM), size="small")
            failed = report.first_failure
            assert failed is not None and failed.name == "smoke" and reason in failed.detail, (name, failed)


def test_the_prompt_and_the_answer_checks_of_a_whole_problem():
    brief = problem_brief(CUMSUM)
    ctx = AgentContext(kernel="problem", backend="triton", device="cpu", device_name="cpu", shape={}, dtype="fp32",
                       parent_id=MODEL_SEED, parent_source=brief.source, parent_params={}, parent_measurement=None,
                       best=None, pool=[], history=[], round=0, problem=brief.path)
    prompt = build_prompt(ctx, brief)
    assert "return torch.cumsum(x, dim=self.dim)" in prompt and "class ModelNew(torch.nn.Module)" in prompt
    assert "starting point: the problem's Model" in prompt and "torch.manual_seed(42)" in prompt
    assert check_source(GOOD_CUMSUM, SIGNATURE, "triton", "ModelNew") is None
    no_class = GOOD_CUMSUM.replace("class ModelNew(", "class Other(")
    assert "defines no top-level class ModelNew" in check_source(no_class, SIGNATURE, "triton", "ModelNew")
    no_kernel = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.cumsum(-1)\n"
    assert "does not import triton" in check_source(no_kernel, SIGNATURE, "triton", "ModelNew")


def answer(code: str) -> str:
    return (f"TIER: 3\nTITLE: One program per row\nHYPOTHESIS: a row fits one block; tl.cumsum scans it.\n"
            f"VARIANT: BLOCK=next_pow2(cols)\n```python\n{code}```\n")


def test_kernelbench_with_an_llm_solves_a_problem_of_no_known_kernel_type(llm_server, tmp_path):  # noqa: F811
    """`autokernel kernelbench cumsum --agent openai/test-model --api-base URL`: the problem that the playbook
    skips becomes one whole-problem target, the LLM's ModelNew passes, and model_new.py is that ModelNew."""
    second = GOOD_CUMSUM.replace("BLOCK=triton.next_power_of_2(n_cols))", "BLOCK=triton.next_power_of_2(n_cols), num_warps=2)")
    llm_server.play(answer(GOOD_CUMSUM), answer(second))  # two rounds, one experiment each
    db = tmp_path / "kb.db"
    env = dict(os.environ, OPENAI_API_KEY="sk-test", AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "kernelbench", str(CUMSUM),
                           "--agent", "openai/test-model", "--api-base", llm_server.api_base, "--device", "cpu",
                           "--max-experiments-per-problem", "2", "--json", "--db", str(db)],
                          capture_output=True, text=True, timeout=400, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(proc.stdout)["problems"]
    assert row["status"] == "correct", row
    assert row["kernels"] == ["problem"] and row["model_new"].endswith("model_new.py")
    model_new = Path(row["model_new"]).read_text()
    assert "class ModelNew(torch.nn.Module)" in model_new and "_cumsum_rows" in model_new
    store = Store(db)
    events = [e for _, e in store.events(row["session_id"])]
    targets = [e.target for e in events if isinstance(e, ev.TargetStarted)]
    kept = [e.candidate_id for e in events if isinstance(e, ev.Decision) and e.decision == "kept"]
    (integration,) = [e for e in events if isinstance(e, ev.IntegrationResult)]
    assert targets == ["problem"] and kept[0] == "problem-0001" and integration.correct
    assert len(llm_server.requests) == 2 and "return torch.cumsum(x, dim=self.dim)" in llm_server.user_messages(0)[0]
    batch = [s for s in store.sessions() if s["kind"] == "kernelbench"][0]
    assert batch["summary"]["problems"][0]["status"] == "correct"
    # the standalone file runs the KernelBench way, in a fresh process
    run = subprocess.run([sys.executable, "-c", (
        "import importlib.util, torch\n"
        f"s = importlib.util.spec_from_file_location('mn', {row['model_new']!r}); m = importlib.util.module_from_spec(s)\n"
        "s.loader.exec_module(m)\nx = m.get_inputs()\n"
        "print(torch.allclose(m.ModelNew(*m.get_init_inputs())(*x), m.Model(*m.get_init_inputs())(*x), atol=1e-2))\n")],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, AUTOKERNEL_MODEL_SIZE="small"))
    assert run.stdout.strip() == "True", run.stderr[-2000:]


@pytest.fixture(autouse=True)
def _keep_environ():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
