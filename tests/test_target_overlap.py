"""With several workers a session keeps them busy across targets: a worker the oldest open target cannot use
(its starter runs alone, its end waits for its last experiments) starts the next target of the walk. Each
target still ends after its own experiments are decided, its plateau counts its own experiments, the budget
is the session's, a skip skips the oldest open target, and a session cut mid-way resumes every open target.
With one worker the targets run one after the other. In-process fake workers and agents; the order facts
come from the workers' shared log and the stored events."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.agents.base import Idea, Variant
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.session_state import SessionState
from autokernel.engine.store import Store

from loop_doubles import FakeWorker, fake_profiler, fake_source, install_fake_specs

GATE_S = 20.0  # how long a gated check waits: only a session that never overlaps targets waits it out
A, B = "fakesoft", "fakenorm"  # the walk's first and second target (Amdahl order), their starters tagged so


def _tag(path) -> str:
    return re.search(r"tag=(\S*)", Path(path).read_text().splitlines()[0]).group(1)


class LoggingWorker(FakeWorker):
    """A named fake worker logging each check's start and end in a log the pool's workers share; the check of
    the candidate tagged `gated` waits for `gate` (and logs whether it opened); `on_start(tag)` runs as a
    check starts; a check of the tag `crash` is cut as a Ctrl-C would cut it."""

    def __init__(self, label: str, log: list, gate: threading.Event, gated: str = "", on_start=lambda tag: None,
                 crash: str = ""):
        super().__init__()
        self.label, self.device = label, "cpu"
        self.log, self.gate, self.gated, self.on_start, self.crash = log, gate, gated, on_start, crash

    def check(self, path, kernel, backend, **kwargs):
        tag = _tag(path)
        self.log.append((self.label, "start", tag))
        self.on_start(tag)
        if tag == self.crash:
            raise KeyboardInterrupt()
        if tag == self.gated:
            self.log.append((self.label, "gate opened", self.gate.wait(GATE_S)))
        report = super().check(path, kernel, backend, **kwargs)
        self.log.append((self.label, "end", tag))
        return report


class SlowerVariants:
    """Per call, one idea of one variant a tenth slower than its parent: a target ends on its plateau or a budget."""

    name = "slower"

    def __init__(self):
        self.calls = 0

    def propose(self, ctx):
        self.calls += 1
        ms = round(ctx.parent_measurement.kernel_ms * 1.1, 6)
        tag = f"{ctx.kernel}-{self.calls}"
        return [Idea(tier=1, title=f"idea {tag}", hypothesis="slower",
                     variants=[Variant(source=fake_source(ms, tag=tag), label=tag)])]


def _session(tmp_path, monkeypatch, workers, store=None, **cfg) -> tuple[OptimizeSession, Store]:
    """A two-target session (one seed a round) on `workers`, not run yet."""
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_specs(monkeypatch, tmp_path, kinds=(A, B))
    (tmp_path / "model.py").write_text("# the fake profiler never reads this\n")
    store = store or Store(tmp_path / "s.db")
    config = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, seeds=1, **cfg)
    return OptimizeSession(config, store, agent=SlowerVariants(), worker=workers, profiler=fake_profiler((A, B))), store


def _events(store: Store, session: OptimizeSession) -> list[ev.Event]:
    return list(store.iter_events(session.session_id))


def _target_of(events: list[ev.Event]) -> dict[str, str]:
    return {e.candidate_id: e.target for e in events if isinstance(e, ev.CandidateWritten)}


def _done(events: list[ev.Event]) -> dict[str, str]:
    return {e.target: e.reason for e in events if isinstance(e, ev.TargetDone)}


def _ends_after_its_own_experiments(events: list[ev.Event]) -> None:
    """Each target's TargetDone follows every decision of its candidates, and nothing of it is written after."""
    target_of = _target_of(events)
    for name in _done(events):
        end = next(i for i, e in enumerate(events) if isinstance(e, ev.TargetDone) and e.target == name)
        own = [i for i, e in enumerate(events) if isinstance(e, (ev.CandidateWritten, ev.Decision))
               and target_of.get(e.candidate_id) == name]
        assert own and max(own) < end, (name, own, end)


def test_a_free_worker_starts_the_next_target_while_the_first_ones_starter_runs(tmp_path, monkeypatch):
    log, gate = [], threading.Event()
    opens = lambda tag: tag == B and gate.set()  # noqa: E731  (B's starter lets A's go)
    workers = [LoggingWorker(f"cpu{i}", log, gate, gated=A, on_start=opens) for i in range(2)]
    session, store = _session(tmp_path, monkeypatch, workers, plateau=2)
    session.run()
    events = _events(store, session)
    assert store.session(session.session_id)["status"] == "completed"
    # A's starter was still being checked when the other worker began B's starter
    assert ("cpu0", "gate opened", True) in log, log
    assert log.index(("cpu1", "start", B)) < log.index(("cpu0", "end", A)), log
    started = [e.target for e in events if isinstance(e, ev.TargetStarted)]
    assert started == [A, B]
    first_decision = next(i for i, e in enumerate(events) if isinstance(e, ev.Decision))
    assert next(i for i, e in enumerate(events) if isinstance(e, ev.TargetStarted) and e.target == B) < first_decision
    _ends_after_its_own_experiments(events)
    # the plateau counts each target's own experiments: two after its starter, whatever the other target runs
    assert _done(events) == {A: "plateau", B: "plateau"}
    target_of = _target_of(events)
    for name in (A, B):
        decided = [e for e in events if isinstance(e, ev.Decision) and target_of[e.candidate_id] == name]
        assert [d.decision for d in decided] == ["kept", "discarded", "discarded"], (name, decided)


def test_the_screens_show_the_oldest_open_target_while_the_next_one_runs(tmp_path, monkeypatch):
    log, gate = [], threading.Event()
    opens = lambda tag: tag == B and gate.set()  # noqa: E731
    workers = [LoggingWorker(f"cpu{i}", log, gate, gated=A, on_start=opens) for i in range(2)]
    session, store = _session(tmp_path, monkeypatch, workers, plateau=2)
    session.run()
    state, open_targets, written = SessionState(), [], set()
    both_open = False
    for e in _events(store, session):
        state.apply(e)
        if isinstance(e, ev.TargetStarted):
            open_targets.append(e.target)
        elif isinstance(e, ev.TargetDone):
            open_targets.remove(e.target)
        elif isinstance(e, ev.CandidateWritten):
            written.add(e.target)
        if open_targets:
            assert state.current_target == open_targets[0], (e, state.current_target)
        if state.candidate is not None and state.current_target in written:
            assert state.candidate.target == state.current_target, e  # B's experiments stay off A's panel
        marked = {r.kind for r in state.rows if r.status == "target"}
        assert marked == set(open_targets), (e, marked)
        both_open = both_open or len(open_targets) == 2
    # Which target ends last depends on how the two workers' experiments interleave: the screens end on it.
    last = [e.target for e in _events(store, session) if isinstance(e, ev.TargetDone)][-1]
    assert both_open and state.current_target == last and state.target.done == "plateau"


def test_the_budget_of_experiments_is_the_sessions_across_open_targets(tmp_path, monkeypatch):
    log, gate = [], threading.Event()
    workers = [LoggingWorker(f"cpu{i}", log, gate) for i in range(3)]
    session, store = _session(tmp_path, monkeypatch, workers, max_experiments=5, plateau=50)
    session.run()
    events = _events(store, session)
    written = [e for e in events if isinstance(e, ev.CandidateWritten)]
    assert len(written) == 5 and {e.target for e in written} == {A, B}
    assert len([e for e in events if isinstance(e, ev.Decision)]) == 5  # every one decided before the end
    assert _done(events) == {A: "budget", B: "budget"}
    _ends_after_its_own_experiments(events)


def test_one_worker_searches_the_targets_one_after_the_other(tmp_path, monkeypatch):
    session, store = _session(tmp_path, monkeypatch, FakeWorker(), plateau=2)
    session.run()
    events = _events(store, session)
    marks = [(type(e).__name__, e.target) for e in events if isinstance(e, (ev.TargetStarted, ev.TargetDone))]
    assert marks == [("TargetStarted", A), ("TargetDone", A), ("TargetStarted", B), ("TargetDone", B)]
    # each experiment's events run from its writing to its decision with no other experiment's between
    current = None
    for e in events:
        if isinstance(e, ev.CandidateWritten):
            assert current is None, e
            current = e.candidate_id
        elif isinstance(e, (ev.StageResult, ev.BenchResult, ev.Decision)):
            assert e.candidate_id == current, e
            if isinstance(e, ev.Decision):
                current = None
    target_of = _target_of(events)
    b_start = next(i for i, e in enumerate(events) if isinstance(e, ev.TargetStarted) and e.target == B)
    assert all(target_of[e.candidate_id] == (A if i < b_start else B)
               for i, e in enumerate(events) if isinstance(e, ev.CandidateWritten))


def test_a_skip_skips_the_oldest_open_target(tmp_path, monkeypatch):
    log, gate = [], threading.Event()
    box: dict = {}

    def skip_when_b_starts(tag):
        if tag == B:
            box["session"].skip_target()  # the screens show A (the oldest open target): A is the one skipped
            gate.set()

    workers = [LoggingWorker(f"cpu{i}", log, gate, gated=A, on_start=skip_when_b_starts) for i in range(2)]
    session, store = _session(tmp_path, monkeypatch, workers, plateau=2)
    box["session"] = session
    session.run()
    events = _events(store, session)
    assert ("cpu0", "gate opened", True) in log, log
    assert _done(events) == {A: "skipped", B: "plateau"}
    target_of = _target_of(events)
    assert [e.candidate_id for e in events if isinstance(e, ev.CandidateWritten) and target_of[e.candidate_id] == A] \
        == [next(e.candidate_id for e in events if isinstance(e, ev.CandidateWritten))]  # only its starter ran
    _ends_after_its_own_experiments(events)


@pytest.mark.parametrize("how", ["stop", "crash"])
def test_a_session_cut_with_two_targets_open_resumes_both_and_finishes(tmp_path, monkeypatch, how):
    log, gate = [], threading.Event()
    box: dict = {}

    def cut_when_b_starts(tag):
        if tag == B:
            if how == "stop":
                box["session"].stop()
            gate.set()

    cut = [LoggingWorker(f"cpu{i}", log, gate, gated=A, on_start=cut_when_b_starts, crash=B if how == "crash" else "")
           for i in range(2)]
    session, store = _session(tmp_path, monkeypatch, cut, plateau=2)
    box["session"] = session
    session.run()  # a stop lets both starters end; a Ctrl-C cuts B's mid-check, and A's, under way, is decided
    sid = session.session_id
    assert store.session(sid)["status"] == "stopped"
    before = _events(store, session)
    assert [e.target for e in before if isinstance(e, ev.TargetStarted)] == [A, B]
    assert not _done(before)
    decided = {e.candidate_id for e in before if isinstance(e, ev.Decision)}
    cut_short = [cid for cid in _target_of(before) if cid not in decided]
    assert [_target_of(before)[cid] for cid in cut_short] == ([B] if how == "crash" else [])

    fresh = [LoggingWorker(f"cpu{i}", [], threading.Event()) for i in range(2)]
    resumed, _ = _session(tmp_path, monkeypatch, fresh, store=store, plateau=2, resume=sid)
    resumed.run()
    events = _events(store, resumed)
    assert store.session(sid)["status"] == "completed"
    assert _done(events) == {A: "plateau", B: "plateau"}
    decisions = [e.candidate_id for e in events if isinstance(e, ev.Decision)]
    assert len(decisions) == len(set(decisions)) == len(_target_of(events))  # each experiment decided once
    # a cut experiment is finished under its own number before its target writes anything new
    after = events[len(before):]
    for cid in cut_short:
        finished = next(i for i, e in enumerate(after) if isinstance(e, ev.Decision) and e.candidate_id == cid)
        assert not [e for e in after[:finished] if isinstance(e, ev.CandidateWritten) and e.target == B]
    _ends_after_its_own_experiments(events)


def test_a_pending_skip_waits_for_the_oldest_open_target_not_any_target_that_ends():
    """A skip asked for and not yet taken (a stop got there first) is for the oldest open target: another open
    target ending must not clear it, or the resume would not skip what the person asked it to."""
    from autokernel.engine.search_state import SearchState

    state = SearchState(session_id="s")
    for name in (A, B):
        state.apply(ev.TargetStarted(target=name, shape={"n": 1}, dtype="fp32"))
    state.apply(ev.ControlChanged(action="skip_target"))
    state.apply(ev.TargetDone(target=B, reason="plateau"))
    assert state.skip_pending and state.current_target().name == A
    state.apply(ev.TargetDone(target=A, reason="skipped"))
    assert not state.skip_pending
