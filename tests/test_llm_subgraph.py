"""The LLM agent on a subgraph target (issue 17, item 5): an optimize session on a model whose only operation is
of none of the nine kernel types (a cumsum) makes that row a subgraph problem seeded from Inductor, and the
LLM agent (litellm's real HTTP path to the scripted server of tests/llm_support.py) gets the problem, the
seed's source and the seed's measurement in its prompt; its answer (Triton kernels and `class ModelNew`, the
problem left out) becomes a whole candidate file with the problem put in, passes the real worker's checks and
is kept; that file's `kernel_fn` is what goes back into the model. Answers that would break the swap are
refused with their reason, and the request timeout is the user's to set (`--llm-timeout-s`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.errors import UserError
from llm_support import llm_server  # noqa: F401  (a fixture)

# One real session: a profile, a torch.export capture, Inductor's code generation for the seed, worker subprocesses
# under Triton's interpreter (a minute or two on a shared CPU box).
pytestmark = pytest.mark.timeout(900)

MODEL = '''"""A running sum over the last dimension: an operation of none of the nine kernel types."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
'''

# What a model writes for the target: all rows in one program (the seed runs one program per row), no problem.
CUMSUM = '''import torch
import triton
import triton.language as tl


@triton.jit
def _rows_cumsum(x_ptr, y_ptr, rows, cols, stride, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, COLS)[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(x_ptr + r * stride + c, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + r * cols + c, tl.cumsum(x, axis=1).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(Model):
    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        rows, cols = x2.shape
        y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
        block = min(triton.next_power_of_2(rows), 64)
        _rows_cumsum[(triton.cdiv(rows, block),)](x2, y, rows, cols, x2.stride(0), ROWS=block,
                                                   COLS=triton.next_power_of_2(cols))
        return y.reshape(x.shape)
'''

ANSWER = ("TIER: 2\nTITLE: All rows in one program\nHYPOTHESIS: the seed launches one program per row; one "
          f"program scanning every row pays the launch once.\nVARIANT: one program\n```python\n{CUMSUM}```\n")

USE_KERNEL = """
import sys, torch
sys.path.insert(0, {folder!r})
import kept
x = torch.randn(8, 16)
got = kept.kernel_fn(x)
print(bool(torch.allclose(got, torch.cumsum(x, -1), atol=1e-5, rtol=1e-5)), kept.kernel_fn.subgraph["targets"])
"""


@pytest.fixture(scope="module")
def session(llm_server, tmp_path_factory):
    """One optimize session with the LLM agent: the seed, then the scripted answer (two experiments)."""
    from autokernel.engine.agents.llm import LLMAgent
    from autokernel.engine.session import OptimizeSession, SessionConfig
    from autokernel.engine.store import Store

    tmp = tmp_path_factory.mktemp("llm_subgraph")
    old = os.environ.get("AUTOKERNEL_CACHE_DIR")
    os.environ["AUTOKERNEL_CACHE_DIR"] = str(tmp / "cache")
    model = tmp / "cumsum_model.py"
    model.write_text(MODEL)
    llm_server.play(ANSWER)
    try:
        agent = LLMAgent("openai/test-model", api_base=llm_server.api_base, api_key="sk-test", timeout_s=120,
                         backoff_s=0.05)
        store = Store(tmp / "sessions.db")
        config = SessionConfig(model_path=str(model), device="cpu", agent="openai/test-model",
                               api_base=llm_server.api_base, integrate=False, max_experiments=2)
        run = OptimizeSession(config, store, agent=agent)
        summary = run.run()
    finally:
        if old is None:
            os.environ.pop("AUTOKERNEL_CACHE_DIR", None)
        else:
            os.environ["AUTOKERNEL_CACHE_DIR"] = old
    events = [e for _, e in store.events(run.session_id)]
    return events, summary, list(llm_server.requests), tmp


def test_the_llm_answer_for_a_subgraph_target_is_judged_and_kept(session):
    events, summary, requests, tmp = session
    logs = "\n".join(e.message for e in events if isinstance(e, (ev.Log, ev.ErrorEvent)))
    assert summary["status"] == "completed", logs
    assert [e.target for e in events if isinstance(e, ev.TargetStarted)] == ["sub_cumsum"], logs
    assert len(requests) == 1
    written = [e for e in events if isinstance(e, ev.CandidateWritten)]
    assert [w.label for w in written] == ["Inductor seed", "one program"], logs
    llm = written[1]
    assert "_rows_cumsum" in llm.source and "kernel_fn.subgraph = SUBGRAPH" in llm.source  # the problem put in
    stages = [e for e in events if isinstance(e, ev.StageResult) and e.candidate_id == llm.candidate_id
              and e.status not in ("running", "pending")]
    assert stages and all(s.status in ("pass", "skipped") for s in stages), [(s.stage, s.detail) for s in stages]
    decisions = {e.candidate_id: e.decision for e in events if isinstance(e, ev.Decision)}
    assert decisions[llm.candidate_id] == "kept", decisions
    # the kept file is one a model can use: its kernel_fn (the problem's) runs the LLM's kernel
    folder = tmp / "kept"
    folder.mkdir()
    (folder / "kept.py").write_text(llm.source)
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", USE_KERNEL.format(folder=str(folder))], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "True" and "aten.cumsum.default" in done.stdout


def test_the_prompt_carries_the_problem_the_seed_and_its_measurement(session):
    events, _, requests, _ = session
    (prompt,) = [m["content"] for m in requests[0]["body"]["messages"] if m["role"] == "user"]
    seed = next(e for e in events if isinstance(e, ev.CandidateWritten) and e.label == "Inductor seed")
    bench = next(e for e in events if isinstance(e, ev.BenchResult) and e.candidate_id == seed.candidate_id)
    assert "torch.ops.aten.cumsum.default(x, -1)" in prompt  # the problem as extracted
    assert f"Inductor's seed ({seed.candidate_id})" in prompt
    kernel = next(line for line in seed.source.splitlines() if line.startswith("def triton_"))
    assert kernel in prompt and "K0_XBLOCK = " in prompt  # the seed's own source
    measured = f"Measured: {bench.kernel_ms:.4g} ms"
    assert measured in prompt and f"{bench.speedup_eager:.3g}x vs eager" in prompt
    assert "verbatim ----" not in prompt  # the problem is shown once, not again inside the seed
    assert "Do not define kernel_fn, SUBGRAPH or _BUILT" in prompt


def _seed_like() -> str:
    """A seed's shape: a prelude, the problem verbatim between the marker lines, knobs, kernels, ModelNew."""
    problem = MODEL.replace('"""A running sum', '"""Problem: a running sum') + (
        "\nSUBGRAPH = {'targets': ['aten.cumsum.default'], 'attrs': []}\n\n\ndef kernel_fn(*args):\n"
        "    return globals()['ModelNew']()(*args)\n\n\nkernel_fn.subgraph = SUBGRAPH\n")
    return ('"""ModelNew for sub_cumsum.py, seeded."""\n\nimport torch\nimport triton\n\n'
            f"# ---- the problem sub_cumsum.py, verbatim ----\n{problem}# ---- end of the problem ----\n\n"
            "K0_XBLOCK = 1\n\n\n" + CUMSUM.split("\n\n\n", 1)[1])


def _answer(code: str) -> str:
    return f"TIER: 1\nTITLE: t\nHYPOTHESIS: h\n```python\n{code}```\n"


def _parse_for_seed(text: str, seed: str):
    from autokernel.engine.agents.llm_answers import parse_answer
    from autokernel.engine.problem_spec import ENTRY, SIGNATURE
    from autokernel.engine.subgraph_targets import complete_candidate

    return parse_answer(text, SIGNATURE, "triton", 1, known_sources=[seed], entry=ENTRY,
                        complete=lambda code: complete_candidate(code, seed))


def test_an_answer_gets_the_problem_at_its_mark_or_on_top_and_what_breaks_the_swap_is_refused():
    from autokernel.engine.subgraph_targets import fold_problem, problem_mark

    seed = _seed_like()
    folded = fold_problem(seed)
    mark = problem_mark(seed)
    assert mark in folded and "verbatim" not in folded and "kernel_fn.subgraph" not in folded
    # the seed as the prompt shows it, sent back unchanged, is the seed again: no experiment
    ideas, rejected = _parse_for_seed(_answer(folded), seed)
    assert ideas == [] and "repeats the parent" in rejected[0].reason
    # edited at the mark: the problem goes where the mark stands
    ideas, rejected = _parse_for_seed(_answer(folded.replace("K0_XBLOCK = 1", "K0_XBLOCK = 2")), seed)
    assert rejected == [] and ideas[0].variants[0].source.strip() == seed.replace("K0_XBLOCK = 1", "K0_XBLOCK = 2").strip()
    # no mark (and a __future__ import): the problem goes after it, before the code that subclasses Model
    ideas, rejected = _parse_for_seed(_answer("from __future__ import annotations\n" + CUMSUM), seed)
    source = ideas[0].variants[0].source
    assert rejected == [] and source.startswith("from __future__ import annotations\n")
    assert source.index("kernel_fn.subgraph = SUBGRAPH") < source.index("class ModelNew(Model)")
    compile(source, "candidate", "exec")
    # a kernel_fn of its own would leave the model without the problem's (and its SUBGRAPH): refused, with why
    ideas, rejected = _parse_for_seed(_answer(CUMSUM + "\n\ndef kernel_fn(x):\n    return ModelNew()(x)\n"), seed)
    assert ideas == [] and "defines kernel_fn, which the problem defines" in rejected[0].reason
    ideas, rejected = _parse_for_seed(_answer(CUMSUM.replace("class ModelNew", "class Other")), seed)
    assert ideas == [] and "no top-level class ModelNew" in rejected[0].reason


def test_the_request_timeout_is_the_users_to_set(monkeypatch):
    from autokernel.engine.agents.llm import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, LLMAgent, use_timeout_flag
    from autokernel.engine.cli import build_parser

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert LLMAgent("openai/test-model", api_base="http://127.0.0.1:1/v1").timeout_s == DEFAULT_TIMEOUT_S
    for command in ("optimize", "kernelbench"):
        args = build_parser().parse_args([command, "x.py", "--llm-timeout-s", "12.5"])
        assert use_timeout_flag(args) == 12.5
    agent = LLMAgent("openai/test-model", api_base="http://127.0.0.1:1/v1")
    assert agent.timeout_s == 12.5 and agent.describe()["timeout_s"] == 12.5
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(UserError, match=f"^{TIMEOUT_ENV} must be a positive number of seconds, not 'soon'$"):
        LLMAgent("openai/test-model", api_base="http://127.0.0.1:1/v1")


@pytest.mark.parametrize("value", ["0", "abc"])
def test_a_bad_timeout_is_a_one_line_error_of_the_command(value, tmp_path):
    env = dict(os.environ)
    env.pop("AUTOKERNEL_LLM_TIMEOUT_S", None)
    done = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "optimize", str(tmp_path / "m.py"),
                           "--headless", "--llm-timeout-s", value, "--db", str(tmp_path / "s.db")],
                          capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"autokernel optimize: error: --llm-timeout-s must be a positive number of "
                                   f"seconds, not {value!r}")


def test_a_session_the_command_line_builds_for_an_llm_gives_it_subgraph_targets(tmp_path):
    """`optimize --agent MODEL` builds its agent inside the session: it must plan subgraph targets as the
    playbook does."""
    from autokernel.engine.session import OptimizeSession, SessionConfig
    from autokernel.engine.store import Store

    session = OptimizeSession(SessionConfig(agent="openai/test-model", device="cpu"), Store(tmp_path / "s.db"))
    assert session._tunes_seeds()
    playbook = OptimizeSession(SessionConfig(agent="playbook", device="cpu"), Store(tmp_path / "p.db"))
    assert playbook._tunes_seeds()
