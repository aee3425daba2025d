"""Issue 25 item 3: a problem's verdict says what happened, each its own status, counted apart.

A starter that cannot be timed ends its target as `untimed` (the agent is never asked); the tool's own
out of memory, in the search or in the ModelNew check, is `no-fit`, never `incorrect`; a wrong
ModelNew stays `incorrect`. The batch runs real `OptimizeSession`s with the loop's doubles; the
ModelNew check is the real integration subprocess on a problem file that runs out of memory on purpose.
"""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import torch

from autokernel.engine import events as ev
from autokernel.engine.commands.kernelbench import print_report
from autokernel.engine.commands.optimize import HeadlessPrinter
from autokernel.engine.fit import no_fit
from autokernel.engine.integrate import integrate_session_kernels
from autokernel.engine.kernelbench import (STATUSES, BatchConfig, KernelBenchBatch, Problem, ProblemResult,
                                           discover, fast_p, result_from_session)
from autokernel.engine.kernelbench_resume import load_batch
from autokernel.engine.session import OptimizeSession
from autokernel.engine.store import Store
from autokernel.tui.widgets.problems import STATUS_STYLES

from loop_doubles import PROBLEM_SRC, EndlessAgent, FakeWorker, fake_profiler, install_fake_specs

OOM = "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.1 GiB total capacity)"


class UntimedWorker(FakeWorker):
    """Checks like the fake worker; its timer fails."""

    def bench(self, path, kernel, shapes, dtype, backend="triton"):
        raise RuntimeError("no timer on this machine")


class OutOfMemoryWorker(FakeWorker):
    """Runs out of memory checking anything (the tool's own limit, not the kernel's fault)."""

    def check(self, path, kernel, backend, on_stage=None, extra_shapes=None, dtypes=None):
        raise torch.OutOfMemoryError(OOM)


def _factory(agent):
    """Real sessions; the worker by problem name (`untimed`, `oom`, else the plain fake); the ModelNew
    check answers as a correct ModelNew that ran the kept kernel would, so only the search decides the verdict."""
    class Checked(OptimizeSession):
        def _integrate(self, device):
            self.recorder.emit(ev.IntegrationResult(
                replaced=[{"kind": "fakesoft", "calls": 1}], correct=True, model_ms=1.0, eager_ms=1.0,
                detail="KernelBench check: 3/3 trials; ModelNew: /x/model_new.py", speedup_eager=1.0))

    def factory(config, store, listeners):
        stem = Path(config.model_path).stem
        worker = UntimedWorker() if "untimed" in stem else OutOfMemoryWorker() if "oom" in stem else FakeWorker()
        return Checked(config, store, listeners, agent=agent, worker=worker, profiler=fake_profiler(("fakesoft",)))

    return factory


def _problems(tmp_path, monkeypatch, names):
    install_fake_specs(monkeypatch, tmp_path, kinds=("fakesoft",))
    for name in names:
        (tmp_path / name).write_text(PROBLEM_SRC)
    return discover([tmp_path])[0]


def test_an_untimed_starter_and_the_searchs_own_oom_get_their_own_verdicts_and_resume(tmp_path, monkeypatch):
    problems = _problems(tmp_path, monkeypatch, ["1_untimed.py", "2_oom.py", "3_good.py"])
    agent, store = EndlessAgent(), Store(tmp_path / "kb.db")
    config = BatchConfig(device="cpu", max_experiments=4, command="autokernel kernelbench X")
    batch = KernelBenchBatch(problems, config, store, session_factory=_factory(agent),
                             on_result=lambda i, r: i == 1 and batch.stop())
    first = batch.run()
    untimed, oom = (ProblemResult.from_json(r) for r in first["problems"])
    assert untimed.status == "untimed" and not untimed.correct
    assert untimed.reason == "starter could not be timed: RuntimeError: no timer on this machine"
    assert agent.calls == 0  # never asked: nothing to build on, so no "the agent failed repeatedly"
    done = [e for _, e in store.events(untimed.session_id) if isinstance(e, ev.TargetDone)]
    assert [d.reason for d in done] == ["untimed"]
    logs = [e.message for _, e in store.events(untimed.session_id) if isinstance(e, ev.Log)]
    assert not any("failed repeatedly" in m for m in logs)
    assert oom.status == "no-fit" and oom.reason.startswith("does not fit on this CPU: needs 20 GiB")
    assert first["statuses"]["untimed"] == 1 and first["statuses"]["no-fit"] == 1

    # resume reads both rows back as they were and runs only the third problem
    stored = load_batch(store, batch.batch_id, None, "cpu")
    assert [r.status for r in stored.kept] == ["untimed", "no-fit"]
    report = KernelBenchBatch.resuming(stored, store, session_factory=_factory(agent)).run()
    assert [r["status"] for r in report["problems"]] == ["untimed", "no-fit", "correct"]
    assert report["fast_p"]["eager"]["0"] == 1 / 3  # every problem counts, only the good one is correct
    assert {s: n for s, n in report["statuses"].items() if n} == {"correct": 1, "untimed": 1, "no-fit": 1}


OOM_PROBLEM = '''
import torch


class Model(torch.nn.Module):
    """Doubles its input; as ModelNew it runs out of memory, as a problem too big for the machine would."""

    def forward(self, x):
        if type(self).__name__ == "ModelNew":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return x * 2


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def test_a_model_new_out_of_memory_does_not_fit_and_is_never_incorrect(tmp_path):
    problem = tmp_path / "7_big.py"
    problem.write_text(OOM_PROBLEM)
    check = integrate_session_kernels(str(problem), "cpu", [], tmp_path / "integ", mode="kernelbench", timeout_s=120)
    assert check.detail == "does not fit on this CPU: needs 20 GiB" and not check.correct
    session = SimpleNamespace(session_id="s1", summary={"status": "completed"}, config=None, store=None,
                              state=SimpleNamespace(targets={"fakesoft": SimpleNamespace(best=object())},
                                                    integration=check))
    row = result_from_session(Problem("7_big", problem), session, "playbook", 1.0)
    assert row.status == "no-fit" and row.reason == check.detail and row.speedup_eager is None

    out = io.StringIO()
    HeadlessPrinter(out)(check)  # the line `autokernel optimize` and `kernelbench -v` print
    assert "integration: does not fit on this CPU: needs 20 GiB" in out.getvalue()
    assert "DIFFER" not in out.getvalue()


def test_the_report_counts_each_status_apart_and_every_status_has_a_colour():
    rows = [ProblemResult(name=s, path="", status=s, reason=f"why {s}") for s in
            ("correct", "incorrect", "incorrect", "untimed", "no-fit", "skipped", "error")]
    rows[0].speedup_eager = 2.0
    report = {"problems": [r.to_json() for r in rows], "fast_p": fast_p(rows), "counted": 7, "total": 7,
              "complete": True, "meaningful": False, "device": "cpu", "agent": "playbook"}
    out = io.StringIO()
    print_report(report, out)
    assert "statuses: 1 correct, 2 incorrect, 1 untimed, 1 no-fit, 1 skipped, 1 error" in out.getvalue()
    assert fast_p(rows)["eager"]["0"] == 1 / 7
    assert set(STATUSES) <= set(STATUS_STYLES)


def test_no_fit_reads_every_out_of_memory_and_nothing_else():
    assert no_fit(torch.OutOfMemoryError(OOM), "cuda") == "does not fit on this GPU: needs 20 GiB"
    assert no_fit(MemoryError(), "cpu") == "does not fit on this CPU"
    cpu = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 107374182400 bytes. Error code 12"
    assert no_fit(RuntimeError(cpu), "cpu") == "does not fit on this CPU: needs 100 GiB"
    assert no_fit("correctness: crash: worker error: OutOfMemoryError: x", "cuda") == "does not fit on this GPU"
    assert no_fit(RuntimeError("shape mismatch"), "cpu") == "" and no_fit(None, "cpu") == ""


def test_a_whole_problem_whose_last_model_new_ran_out_of_memory_does_not_fit():
    from autokernel.engine.search_state import SearchState
    from autokernel.engine.session import SessionConfig

    def ended(detail):
        events = [ev.TargetStarted(target="problem", shape={}, dtype="fp32"),
                  ev.CandidateWritten(candidate_id="problem-0001", idea_id="idea-0001", experiment=1, target="problem",
                                      backend="triton", label="rewrite", source="x = 1\n", params={}),
                  ev.StageResult(candidate_id="problem-0001", stage="smoke", status="crash", detail=detail),
                  ev.Decision(candidate_id="problem-0001", target="problem", decision="failed"),
                  ev.TargetDone(target="problem", reason="exhausted")]
        return SimpleNamespace(state=SearchState.from_events("s1", events), summary={"status": "completed"},
                               session_id="s1", config=SessionConfig(device="cuda"), store=None)

    problem = Problem("big", Path("big.py"))
    row = result_from_session(problem, ended(f"worker error: OutOfMemoryError: {OOM}"), "openai/m", 1.0)
    assert row.status == "no-fit" and row.reason.startswith("does not fit on this GPU: needs 20 GiB: none of the 1")
    wrong = result_from_session(problem, ended("max abs error 1.0"), "openai/m", 1.0)
    assert wrong.status == "incorrect" and "smoke: crash: max abs error 1.0" in wrong.reason
