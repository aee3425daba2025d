"""A KernelBench problem whose kernel types cover little of its time searches the whole problem first; one they
cover searches it only as the fallback; ModelNew takes the faster of the two routes, never both."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autokernel.engine import events as ev
from autokernel.engine.problem_spec import PROBLEM_TARGET
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.store import Store
from autokernel.engine.whole_problem import FALLBACK, choose_route, covered_share, with_whole_target

from loop_doubles import PROBLEM_SRC, FakeWorker, fake_source, install_fake_specs

ROWS = [{"kind": "other", "share": 0.6}, {"kind": "softmax", "share": 0.3}, {"kind": "softmax", "share": 0.1}]
WHOLE = {"kind": PROBLEM_TARGET, "row": 0}


def _best(name, speedup, meaningful=True):
    best = SimpleNamespace(candidate_id=f"{name}-1", bench={"speedup_eager": speedup, "meaningful": meaningful})
    return SimpleNamespace(name=name), best


def test_coverage_is_of_the_rows_time_and_places_the_whole_problem():
    assert covered_share([{"kind": "softmax"}], ROWS) == pytest.approx(0.4)
    # time in no row (what the profiler could not attribute) counts for neither side
    assert covered_share([{"kind": "softmax"}], [{"kind": "softmax", "share": 0.45}]) == 1.0
    low, said = with_whole_target([{"kind": "softmax", "row": 1}], ROWS, WHOLE)
    assert [p["kind"] for p in low] == [PROBLEM_TARGET, "softmax"] and not low[0].get(FALLBACK)
    assert said.startswith("the kernel types cover 40% of the profiled time") and said.endswith("searched first")
    high, _ = with_whole_target([{"kind": "softmax", "row": 0}], [{"kind": "softmax", "share": 0.9},
                                                                {"kind": "other", "share": 0.1}], WHOLE)
    assert [p["kind"] for p in high] == ["softmax", PROBLEM_TARGET] and high[1][FALLBACK]


def test_the_faster_route_wins_by_amdahl_and_the_whole_one_where_nothing_was_measured():
    # softmax's rows are 40% of the time at 4x: 1 / (0.6 + 0.1) = 1.43x for the kernel route
    use = [_best("softmax", 4.0), _best(PROBLEM_TARGET, 1.3)]
    chosen, why = choose_route(use, ROWS)
    assert [t.name for t, _ in chosen] == ["softmax"] and "1.43x" in why and "1.30x" in why
    chosen, why = choose_route([_best("softmax", 4.0), _best(PROBLEM_TARGET, 1.6)], ROWS)
    assert [t.name for t, _ in chosen] == [PROBLEM_TARGET] and "1.60x" in why
    chosen, why = choose_route([_best("softmax", 4.0, False), _best(PROBLEM_TARGET, 1.0, False)], ROWS)
    assert [t.name for t, _ in chosen] == [PROBLEM_TARGET] and "not measured" in why
    alone = [_best("softmax", 4.0)]
    assert choose_route(alone, ROWS) == (alone, "")


class WholeWriter:
    """Writes fake kernels for every target, the whole ModelNew included (as the LLM agent does)."""

    name = "whole-writer"
    whole_problems = True

    def __init__(self, fail_whole: bool = False, ideas_per_target: int = 1):
        self.asked: list[str] = []
        self.ideas_per_target = ideas_per_target  # then the target ends (exhausted), the next one opens
        self.fail_whole = fail_whole  # every whole ModelNew it writes is wrong

    def propose(self, ctx):
        from autokernel.engine.agents.base import Idea, Variant

        self.asked.append(ctx.kernel)
        if self.asked.count(ctx.kernel) > self.ideas_per_target:
            return []
        ms = (getattr(ctx.parent_measurement, "kernel_ms", None) or 0.55) * 0.9  # none yet for a whole ModelNew
        return [Idea(tier=1, title=f"try {len(self.asked)}", hypothesis="faster",
                     variants=[Variant(source=fake_source(round(ms, 6), tag=str(len(self.asked)),
                                                          fail="smoke" if self.fail_whole and ctx.kernel == PROBLEM_TARGET else ""),
                                       label="v")])]


class ProblemFakeWorker(FakeWorker):
    """The fake worker, also for whole-problem candidates (which come with the problem file)."""

    def check(self, path, kernel, backend, on_stage=None, extra_shapes=None, dtypes=None, **problem):
        return super().check(path, kernel, backend, on_stage, extra_shapes, dtypes)

    def bench(self, path, kernel, shapes, dtype, backend="triton", **problem):
        return super().bench(path, kernel, shapes or [{}], dtype, backend)


def _session(tmp_path, monkeypatch, rows, starter_ms, agent=None, max_experiments=8):
    """Run a KernelBench-mode session of fake kernels over `rows`; its target order, its log, and the kernels its
    integration was handed (the ModelNew check itself answers as a correct one that ran them)."""
    import autokernel.engine.integrate as integrate

    install_fake_specs(monkeypatch, tmp_path, kinds=("fakesoft",), starter_ms=starter_ms)
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM_SRC)
    profile = lambda path, device, size: SimpleNamespace(device=device, total_ms=10.0, rows=rows)  # noqa: E731
    handed = []

    def check(model_path, device, kernels, workdir, **kw):
        handed.extend(k["kind"] for k in kernels)
        return ev.IntegrationResult(replaced=[{"kind": k["kind"], "calls": 3} for k in kernels], correct=True,
                                    detail="KernelBench check: 3/3 trials; ModelNew: /x/model_new.py",
                                    model_ms=1.0, eager_ms=1.5, speedup_eager=1.5, meaningful=True)

    monkeypatch.setattr(integrate, "integrate_session_kernels", check)
    config = SessionConfig(model_path=str(problem), device="cpu", max_experiments=max_experiments,
                           integration="kernelbench")
    store = Store(tmp_path / "s.db")
    session = OptimizeSession(config, store, agent=agent or WholeWriter(), worker=ProblemFakeWorker(meaningful=True),
                              profiler=profile)
    session.run()
    started = [e.target for _, e in store.events(session.session_id, types=[ev.TargetStarted.type])]
    logs = [e.message for _, e in store.events(session.session_id, types=[ev.Log.type])]
    return SimpleNamespace(started=started, logs=logs, handed=handed, session=session, problem=problem)


def _rows(known_share):
    shape = {"rows": 4, "cols": 8}
    return [{"name": "aten::fakesoft", "kind": "fakesoft", "share": known_share, "target_shape": shape,
             "target_dtype": "fp32"},
            {"name": "aten::conv2d", "kind": "other", "share": 1.0 - known_share, "target_shape": None,
             "target_dtype": "fp32"}]


def test_a_problem_mostly_outside_the_kernel_types_searches_the_whole_problem_first(tmp_path, monkeypatch):
    run = _session(tmp_path, monkeypatch, _rows(0.2), starter_ms=0.5)
    assert run.started[0] == PROBLEM_TARGET, run.started
    assert any("cover 20%" in m and "searched first" in m for m in run.logs), run.logs


def test_the_fallback_runs_only_when_no_kernel_type_kept_a_kernel_faster_than_eager(tmp_path, monkeypatch):
    run = _session(tmp_path / "fast", monkeypatch, _rows(0.9), starter_ms=0.5)  # 2x eager kept
    assert run.started == ["fakesoft"], run.started
    assert any(m.startswith("whole-problem target left out: fakesoft kept a kernel") for m in run.logs), run.logs
    run = _session(tmp_path / "slow", monkeypatch, _rows(0.9), starter_ms=4.0)  # 0.25x eager
    assert run.started[0] == "fakesoft" and PROBLEM_TARGET in run.started, run.started
    assert run.handed == [PROBLEM_TARGET]  # the whole ModelNew, never mixed with the slower kernel


def test_a_whole_problem_that_failed_leaves_model_new_to_the_kernel_types(tmp_path, monkeypatch):
    from autokernel.engine.kernelbench import Problem, result_from_session

    run = _session(tmp_path, monkeypatch, _rows(0.2), starter_ms=0.5, agent=WholeWriter(fail_whole=True))
    assert run.started == [PROBLEM_TARGET, "fakesoft"], run.started
    assert run.handed == ["fakesoft"]
    row = result_from_session(Problem("p", run.problem), run.session, "whole-writer", 1.0)
    assert row.status == "correct" and row.kernels == ["fakesoft"], row


@pytest.mark.parametrize("cap, kernel_type, whole", [(2, 1, 1), (3, 1, 2), (5, 3, 2)])
def test_a_tight_budget_keeps_the_fallback_its_seed_and_first_move(tmp_path, monkeypatch, cap, kernel_type, whole):
    run = _session(tmp_path, monkeypatch, _rows(0.9), starter_ms=4.0, agent=WholeWriter(ideas_per_target=99),
                   max_experiments=cap)
    assert run.started == ["fakesoft", PROBLEM_TARGET], run.started
    assert any(f"the last {whole} experiment(s) are kept for the whole-problem fallback" in m for m in run.logs), run.logs
    per_target = {name: len(t.candidates) for name, t in run.session.state.targets.items()}
    assert per_target == {"fakesoft": kernel_type, PROBLEM_TARGET: whole}, per_target


def test_under_a_cap_of_one_the_kernel_types_starter_still_runs(tmp_path, monkeypatch):
    run = _session(tmp_path, monkeypatch, _rows(0.9), starter_ms=4.0, agent=WholeWriter(ideas_per_target=99),
                   max_experiments=1)
    assert run.started == ["fakesoft"] and len(run.session.state.targets["fakesoft"].candidates) == 1
