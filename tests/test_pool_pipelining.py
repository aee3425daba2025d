"""A pool keeps every worker busy across rounds: when a round's variants have all started, a free worker gets
the next round's at once instead of waiting for the last of the round to end; a proposal with nothing new
while an experiment runs waits for it rather than end the target; budgets and the plateau count as with one
worker. In-process fake workers and agents: the order facts come from their logs and the stored events."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.agents.base import Idea, Variant
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.store import Store

from loop_doubles import FakeWorker, fake_profiler, fake_source, install_fake_specs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from pool_bench import busy_line, session_rate  # noqa: E402  (scripts/ is not a package)

GATE_S = 30.0  # how long a slow check waits for its gate: only a broken pool ever waits it out


def _tag(path) -> str:
    return re.search(r"tag=(\S*)", Path(path).read_text().splitlines()[0]).group(1)


class GatedWorker(FakeWorker):
    """A named fake worker whose checks log their start and end in a log shared by the pool; a check of a
    candidate tagged `slow` waits for `gate` first (and logs whether it opened), and a check whose tag
    `opens` says so opens it."""

    def __init__(self, label: str, log: list, gate: threading.Event, opens=lambda tag: False, delay_s: float = 0.0):
        super().__init__(delay_s=delay_s)
        self.label, self.device = label, "cpu"
        self.log, self.gate, self.opens = log, gate, opens

    def check(self, path, kernel, backend, **kwargs):
        tag = _tag(path)
        self.log.append((self.label, "start", tag))
        if self.opens(tag):
            self.gate.set()
        if tag == "slow":
            self.log.append((self.label, "gate opened", self.gate.wait(GATE_S)))
        report = super().check(path, kernel, backend, **kwargs)
        self.log.append((self.label, "end", tag))
        return report


class OneVariantAgent:
    """Per call, the next step of `script`: (factor of the parent's time, tag) makes one idea of one variant,
    None (or the script's end) nothing new. `on_call(n)` runs as the n-th call is made."""

    name = "one-variant"

    def __init__(self, script: list, on_call=lambda n: None):
        self.script, self.on_call, self.calls = list(script), on_call, 0

    def propose(self, ctx):
        self.calls += 1
        self.on_call(self.calls)
        step = self.script[self.calls - 1] if self.calls <= len(self.script) else None
        if step is None:
            return []
        factor, tag = step
        ms = round(ctx.parent_measurement.kernel_ms * factor, 6)
        return [Idea(tier=1, title=f"idea {tag}", hypothesis=f"{tag} from {ctx.parent_id}",
                     variants=[Variant(source=fake_source(ms, tag=tag), label=tag)])]


class SlowerEveryTime(OneVariantAgent):
    """Always one new variant, slower than the best: a target it searches ends on a budget or the plateau."""

    def propose(self, ctx):
        self.script.append((1.1, f"slower{self.calls + 1}"))
        return super().propose(ctx)


def _session(tmp_path, monkeypatch, agent, workers, **cfg) -> list[ev.Event]:
    """A one-target session with one seed a round (so one idea of one variant a round); its stored events."""
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_specs(monkeypatch, tmp_path, kinds=("fakesoft",))
    (tmp_path / "model.py").write_text("# the fake profiler never reads this\n")
    store = Store(tmp_path / f"s{len(list(tmp_path.glob('s*.db')))}.db")
    config = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, seeds=1, **cfg)
    session = OptimizeSession(config, store, agent=agent, worker=workers, profiler=fake_profiler(("fakesoft",)))
    session.run()
    assert store.session(session.session_id)["status"] == "completed"
    return list(store.iter_events(session.session_id))


def _written(events: list[ev.Event]) -> dict[str, str]:
    """Each candidate's tag by candidate id."""
    return {e.candidate_id: re.search(r"tag=(\S*)", e.source).group(1) for e in events
            if isinstance(e, ev.CandidateWritten)}


def _index(events: list[ev.Event], cls, candidate_id: str) -> int:
    return next(i for i, e in enumerate(events) if isinstance(e, cls) and e.candidate_id == candidate_id)


def _pair(log: list, gate: threading.Event, **kw) -> list[GatedWorker]:
    return [GatedWorker("cpu0", log, gate, **kw), GatedWorker("cpu1", log, gate, **kw)]


def test_a_free_worker_starts_the_next_round_while_the_last_one_of_a_round_runs(tmp_path, monkeypatch):
    log, gate = [], threading.Event()
    workers = _pair(log, gate, opens=lambda tag: tag.startswith("r"))  # a later round's check lets the slow one go
    agent = OneVariantAgent([(1.5, "slow"), (1.2, "r1"), (1.3, "r2"), (1.4, "r3")])
    events = _session(tmp_path, monkeypatch, agent, workers, max_experiments=5)
    # the slow experiment, alone in its round, was still checking when the other worker began the next round's
    assert ("cpu0", "gate opened", True) in log, log
    assert log.index(("cpu1", "start", "r1")) < log.index(("cpu0", "end", "slow")), log
    ids = {tag: cid for cid, tag in _written(events).items()}
    assert _index(events, ev.StageResult, ids["r1"]) < _index(events, ev.Decision, ids["slow"])
    rounds = {e.title: e.round for e in events if isinstance(e, ev.IdeaProposed)}
    assert rounds["idea r1"] == rounds["idea slow"] + 1
    # the budget still counts every experiment once, each decided, the target ending on it
    assert sorted(_written(events).values()) == ["fakesoft", "r1", "r2", "r3", "slow"]
    assert len([e for e in events if isinstance(e, ev.Decision)]) == 5
    assert [(e.reason) for e in events if isinstance(e, ev.TargetDone)] == ["budget"]


def test_a_proposal_with_nothing_new_while_one_runs_waits_for_it_and_asks_again(tmp_path, monkeypatch):
    log, gate = [], threading.Event()
    asked_while_slow_ran = []

    def on_call(n):  # the second question comes while the slow one waits for it: then it may go on
        if n == 2:
            asked_while_slow_ran.append(("cpu0", "end", "slow") not in log)
            gate.set()

    agent = OneVariantAgent([(1.5, "slow"), None, (1.2, "late")], on_call=on_call)
    events = _session(tmp_path, monkeypatch, agent, _pair(log, gate))
    assert asked_while_slow_ran == [True] and ("cpu0", "gate opened", True) in log, log
    ids = {tag: cid for cid, tag in _written(events).items()}
    (done,) = [(i, e) for i, e in enumerate(events) if isinstance(e, ev.TargetDone)]
    assert "late" in ids and _index(events, ev.Decision, ids["late"]) < done[0]  # the target went on after
    # it ended only when nothing ran and a fresh proposal had nothing new
    assert done[1].reason == "exhausted"
    assert agent.calls == 5  # slow; nothing (slow running); late; nothing (late running); nothing: the end


@pytest.mark.parametrize("limit, reason, message", [
    ({"plateau": 3}, "plateau", "fakesoft: no new best in 3 experiments"),
    ({"max_experiments": 6}, "budget", "fakesoft: max experiments (6) reached"),
])
def test_a_plateau_and_a_budget_stop_two_workers_at_one_workers_count(tmp_path, monkeypatch, limit, reason, message):
    counts = []
    for workers in ([FakeWorker()], [GatedWorker("cpu0", [], threading.Event(), delay_s=0.02),
                                     GatedWorker("cpu1", [], threading.Event(), delay_s=0.02)]):
        events = _session(tmp_path, monkeypatch, SlowerEveryTime([]), workers if len(workers) > 1 else workers[0],
                          **limit)
        assert [e.reason for e in events if isinstance(e, ev.TargetDone)] == [reason]
        assert message in [e.message for e in events if isinstance(e, ev.Log)]
        written = [e for e in events if isinstance(e, ev.CandidateWritten)]
        assert len([e for e in events if isinstance(e, ev.Decision)]) == len(written)
        counts.append(len(written))
    assert counts[0] == counts[1] == (4 if reason == "plateau" else 6), counts


def test_the_bench_says_how_busy_each_worker_was_from_its_experiments_stages_to_their_decisions():
    def experiment(cid, worker_turns, decided):  # worker_turns: (ts, worker) of its stages
        return [ev.CandidateWritten(candidate_id=cid, ts=worker_turns[0][0] - 1.0),
                *[ev.StageResult(candidate_id=cid, stage="smoke", worker=w, ts=ts) for ts, w in worker_turns],
                ev.Decision(candidate_id=cid, decision="discarded", ts=decided)]

    events = [*experiment("a", [(1.0, "gpu0"), (2.0, "gpu0")], 5.0),  # written at 0: the span starts there
              *experiment("b", [(2.0, "gpu1"), (3.0, "gpu1")], 4.0),
              *experiment("c", [(5.0, "gpu0")], 8.0),
              *experiment("d", [(6.0, "gpu1"), (9.0, "gpu0")], 10.0)]  # gpu1 lost mid-way: gpu0 ran it again
    rate = session_rate(events)
    assert rate["span_s"] == 10.0 and rate["experiments"] == 4 and rate["workers"] == ["gpu0", "gpu1"]
    # gpu0: 1-8 and 9-10; gpu1: 2-4 and 6-9
    assert rate["busy"] == pytest.approx({"gpu0": 0.8, "gpu1": 0.5})
    assert busy_line(rate["busy"]) == "gpu0 80% busy, gpu1 50% busy"
