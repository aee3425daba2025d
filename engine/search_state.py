"""What the search knows, folded from its own events: one reducer for a live run and for a resume.

The loop never keeps state the store does not have: every change it makes is an event, and this
fold of the events is what it reads back (pool, best, tried ideas, experiment count). A session
resumed after a crash folds the stored events through the same code, so it continues exactly
where the last written event left it.
"""

from __future__ import annotations

import statistics
from types import SimpleNamespace
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .agents.base import Measurement, Tried
from .results import CRASH, STAGES
from .session_state import model_vs_compile

TERMINAL = ("pass", "fail", "crash", "timeout", "skipped")


@dataclass
class CandidateRecord:
    """One experiment: its source, its stage verdicts, its timing and what was decided."""

    candidate_id: str
    idea_id: str | None
    experiment: int
    target: str
    backend: str
    label: str
    parent_id: str | None
    source: str
    params: dict
    stages: dict[str, tuple[str, str]] = field(default_factory=dict)  # stage -> (status, detail)
    stage_dtypes: dict[str, tuple] = field(default_factory=dict)  # stage -> dtypes it was screened in (empty: all)
    bench: dict[str, Any] | None = None  # BenchResult payload
    decision: str | None = None  # kept | discarded | rejected | failed
    decision_by: str = ""
    reason: str = ""
    awaiting: bool = False
    written_ts: float = 0.0  # when it was written, and when decided: an experiment's wall time
    decided_ts: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)  # stage -> seconds, summed over its checks
    worker: str = ""  # the worker that last ran it (StageResult/BenchResult), and that worker's device
    worker_device: str = ""

    @property
    def is_starter(self) -> bool:
        return self.idea_id is None

    @property
    def passed(self) -> bool:
        return all(self.stages.get(s, ("", ""))[0] == "pass" for s in STAGES)

    @property
    def fully_checked(self) -> bool:
        """Passed every stage in every dtype of its spec, not only in the target's (screening)."""
        return self.passed and not any(self.stage_dtypes.get(s) for s in STAGES)

    @property
    def failure(self) -> str:
        for s in STAGES:
            status, detail = self.stages.get(s, ("pending", ""))
            if status not in ("pass", "skipped", "pending", "running"):
                return f"{s}: {status}" + (f": {detail}" if detail else "")
        return self.reason if self.decision == "failed" else ""

    @property
    def killed_from_outside(self) -> bool:
        """Its worker died of SIGKILL while checking it (an OOM killer, a user's kill): the tool's own timeouts
        are reported as timeouts, and a candidate's own fault as a failure or another signal."""
        return any(status == CRASH and "SIGKILL" in detail for status, detail in self.stages.values())

    @property
    def kernel_ms(self) -> float | None:
        return self.bench.get("kernel_ms") if self.bench else None

    def measurement(self) -> Measurement:
        b = self.bench or {}
        return Measurement(
            candidate_id=self.candidate_id, label=self.label, passed=self.passed and self.decision != "failed",
            failure=self.failure, kernel_ms=b.get("kernel_ms"), fraction_of_ceiling=b.get("fraction_of_ceiling"),
            speedup_eager=b.get("speedup_eager"), speedup_compile=b.get("speedup_compile"), params=dict(self.params),
        )


@dataclass
class TargetState:
    """One bottleneck being searched: (kernel type, shape, dtype, backend) and its experiments."""

    name: str
    row: int
    shape: dict
    dtype: str
    backend: str
    candidates: dict[str, CandidateRecord] = field(default_factory=dict)
    ideas: dict[str, ev.IdeaProposed] = field(default_factory=dict)
    best_id: str | None = None
    done: str | None = None  # the TargetDone reason once finished
    since_improvement: int = 0  # experiments since the best last changed
    rounds: int = 0  # rounds whose ideas were proposed

    @property
    def best(self) -> CandidateRecord | None:
        return self.candidates.get(self.best_id) if self.best_id else None

    @property
    def starters(self) -> list[CandidateRecord]:
        """The starter's runs: one, or a second where the first one's worker was killed from outside."""
        return [c for c in self.candidates.values() if c.is_starter]

    @property
    def starter(self) -> CandidateRecord | None:
        """The starter's latest run."""
        runs = self.starters
        return runs[-1] if runs else None

    def pool(self, size: int) -> list[CandidateRecord]:
        """The fastest candidates that passed and were not rejected: the seeds come from here."""
        ok = [c for c in self.candidates.values()
              if c.passed and c.bench and c.decision in ("kept", "discarded")]
        ok.sort(key=lambda c: (c.kernel_ms, c.experiment))
        return ok[:size]

    def unfinished(self) -> list[CandidateRecord]:
        """Experiments written but not decided (the process died or was stopped mid-way)."""
        return [c for c in self.candidates.values() if c.decision is None]

    def history(self) -> list[Tried]:
        out = []
        for idea_id, idea in self.ideas.items():
            results = [c.measurement() for c in self.candidates.values() if c.idea_id == idea_id and c.decision]
            out.append(Tried(tier=idea.tier, title=idea.title, hypothesis=idea.hypothesis,
                             parent_id=idea.parent_id, results=results))
        return out

    def sources(self) -> set[str]:
        return {c.source for c in self.candidates.values()}


def slower_than_eager(best: CandidateRecord) -> bool:
    """Whether a kept candidate's measured speedup over eager is 1 or less (never so where timings are not
    meaningful: the CPU's interpreter)."""
    b = best.bench or {}
    return bool(b.get("meaningful", True)) and (b.get("speedup_eager") or 0.0) <= 1.0


@dataclass
class SearchState:
    """Everything the loop needs to go on, for the whole session."""

    session_id: str = ""
    started: ev.SessionStarted | None = None
    profile: ev.ProfileReady | None = None
    targets: dict[str, TargetState] = field(default_factory=dict)
    experiments: int = 0
    n_ideas: int = 0
    cost_usd: float = 0.0
    integration: ev.IntegrationResult | None = None
    done: ev.SessionDone | None = None
    last_event_ts: float = 0.0
    # The person's controls that outlive a run: the approval mode the session was last in, and a skip of the
    # open target asked for but not yet taken (a stop got there first). A resume runs with both.
    approval: str = "auto"
    skip_pending: bool = False

    @classmethod
    def from_events(cls, session_id: str, events) -> "SearchState":
        state = cls(session_id=session_id)
        for e in events:
            state.apply(e)
        return state

    def candidate(self, candidate_id: str) -> CandidateRecord | None:
        for t in self.targets.values():
            if candidate_id in t.candidates:
                return t.candidates[candidate_id]
        return None

    def current_target(self) -> TargetState | None:
        return next((t for t in self.targets.values() if t.done is None), None)

    def apply(self, e: ev.Event) -> None:
        """Fold one event in (the reducer). Unknown and UI-only events change nothing."""
        self.last_event_ts = max(self.last_event_ts, e.ts)
        if isinstance(e, ev.SessionStarted):
            self.started = e
            self.approval = e.approval or "auto"
        elif isinstance(e, ev.ProfileReady):
            self.profile = e
        elif isinstance(e, ev.TargetStarted):
            self.targets.setdefault(e.target, TargetState(e.target, e.row, dict(e.shape), e.dtype, e.backend))
        elif isinstance(e, ev.IdeaProposed):
            t = self.targets.get(e.target)
            if t is not None:
                t.ideas[e.idea_id] = e
                t.rounds = max(t.rounds, e.round + 1)
            self.n_ideas += 1
        elif isinstance(e, ev.CandidateWritten):
            t = self.targets.get(e.target)
            if t is not None:
                t.candidates[e.candidate_id] = CandidateRecord(
                    e.candidate_id, e.idea_id or None, e.experiment, e.target, e.backend, e.label,
                    e.parent_id, e.source, dict(e.params or {}), written_ts=e.ts)
            self.experiments = max(self.experiments, e.experiment)
        elif isinstance(e, ev.StageResult):
            c = self.candidate(e.candidate_id)
            if c is not None:
                c.stages[e.stage] = (e.status, e.detail)
                if e.status != "running":
                    c.stage_seconds[e.stage] = c.stage_seconds.get(e.stage, 0.0) + float(e.seconds or 0.0)
                c.stage_dtypes[e.stage] = tuple(e.dtypes or ())
                c.worker, c.worker_device = e.worker or c.worker, e.worker_device or c.worker_device
        elif isinstance(e, ev.BenchResult):
            c = self.candidate(e.candidate_id)
            if c is not None:
                c.bench = e.payload()
                c.worker, c.worker_device = e.worker or c.worker, e.worker_device or c.worker_device
        elif isinstance(e, ev.AwaitingApproval):
            c = self.candidate(e.candidate_id)
            if c is not None:
                c.awaiting = True
        elif isinstance(e, ev.Decision):
            c = self.candidate(e.candidate_id)
            if c is None:
                return
            c.decision, c.decision_by, c.reason, c.awaiting = e.decision, e.by, e.reason, False
            c.decided_ts = e.ts
            t = self.targets[c.target]
            if e.decision == "kept":
                t.best_id = c.candidate_id
                t.since_improvement = 0
                self.integration = None  # a new best makes an earlier integration stale
            elif not c.is_starter:
                t.since_improvement += 1
        elif isinstance(e, ev.TargetDone):
            t = self.targets.get(e.target)
            if t is not None:
                if t is self.current_target():  # a skip is for the oldest open target
                    self.skip_pending = False
                t.done = e.reason or "done"
        elif isinstance(e, ev.ControlChanged):
            self._control(e)
        elif isinstance(e, ev.LLMUsage):
            self.cost_usd = max(self.cost_usd, e.total_cost_usd)
        elif isinstance(e, ev.IntegrationResult):
            self.integration = e
        elif isinstance(e, ev.SessionDone):
            self.done = e

    def _control(self, e: ev.ControlChanged) -> None:
        if e.action == "reopen_target":
            t = self.targets.get(e.value)
            if t is not None:  # a completed session resumed with more budget: its cut-short target goes on
                t.done = None
        elif e.action == "approval" and e.value:
            self.approval = e.value
        elif e.action == "skip_target" and self.current_target() is not None:
            self.skip_pending = True

    def kept(self) -> list[CandidateRecord]:
        """The best kernel of each target, in the order the targets were searched."""
        return [t.best for t in self.targets.values() if t.best is not None]

    def to_integrate(self, at_least_one: bool = False) -> tuple[list[tuple[TargetState, CandidateRecord]], list[str]]:
        """The bests worth swapping into the model, and why the others are left out.

        On a GPU a best that is not faster than eager would slow the model down, so it stays out;
        on the CPU (timings not meaningful) every best goes in, so the path is still exercised. With
        `at_least_one` (a KernelBench ModelNew, which is no submission without a kernel of ours) the least
        slow of them goes in when none is faster.
        """
        use, slower = [], []
        for t in self.targets.values():
            if t.best is not None:
                (slower if slower_than_eager(t.best) else use).append((t, t.best))
        if at_least_one and not use and slower:
            use = [max(slower, key=lambda tb: (tb[1].bench or {}).get("speedup_eager") or 0.0)]
            slower.remove(use[0])
        return use, [f"{t.name}: its best ({best.candidate_id}) is not faster than eager" for t, best in slower]

    def summary(self) -> dict[str, Any]:
        targets = []
        for t in self.targets.values():
            best, starter = t.best, t.starter
            b = (best.bench or {}) if best else {}
            targets.append({
                "target": t.name, "shape": t.shape, "dtype": t.dtype, "backend": t.backend,
                "status": t.done or "in progress",
                "experiments": len(t.candidates),
                "best_candidate": best.candidate_id if best else None,
                "best_label": best.label if best else None,
                "best_ms": b.get("kernel_ms"),
                "starter_ms": starter.kernel_ms if starter else None,
                "eager_ms": b.get("eager_ms"), "compile_ms": b.get("compile_ms"),
                "speedup_eager": b.get("speedup_eager"), "speedup_compile": b.get("speedup_compile"),
                "speedup_vs_starter": (starter.kernel_ms / best.kernel_ms)
                if best and starter and starter.kernel_ms and best.kernel_ms else None,
                "fraction_of_ceiling": b.get("fraction_of_ceiling"),
                # against a copy of the same bytes: what full bandwidth means at this size (None: not measured)
                "fraction_of_copy": (b["achieved"] / b["copy_gbs"]) if b.get("copy_gbs") and b.get("achieved") else None,
                "meaningful": b.get("meaningful"),
            })
        integ = None
        if self.integration is not None:
            integ = self.integration.payload()
        return {
            "session_id": self.session_id,
            "experiments": self.experiments,
            "ideas": self.n_ideas,
            "cost_usd": round(self.cost_usd, 6),
            "targets": targets,
            "integration": integ,
            "model_vs_compile": model_vs_compile(self.integration),
            "experiment_seconds": self.experiment_seconds(),
            "workers": self.workers(),
        }

    def workers(self) -> list[dict[str, Any]]:
        """Each worker that ran an experiment: its device and how many it decided, in order of first use."""
        out: dict[str, dict[str, Any]] = {}
        for t in self.targets.values():
            for c in sorted(t.candidates.values(), key=lambda c: c.experiment):
                if c.worker and c.decision:
                    w = out.setdefault(c.worker, {"worker": c.worker, "device": c.worker_device, "experiments": 0})
                    w["experiments"] += 1
        return list(out.values())

    def experiment_seconds(self) -> dict[str, Any] | None:
        """Wall time per experiment (written to decided), median and slowest, and each stage's median.

        Experiments that waited at the approval gate are left out: the wait is a person's, not the loop's.
        None before any experiment was decided."""
        done = [c for t in self.targets.values() for c in t.candidates.values()
                if c.decided_ts and c.written_ts and c.decision_by in ("", "engine")]
        if not done:
            return None
        spans = sorted(c.decided_ts - c.written_ts for c in done)
        stages = {s: statistics.median([c.stage_seconds[s] for c in done if s in c.stage_seconds])
                  for s in STAGES if any(s in c.stage_seconds for c in done)}
        return {"count": len(spans), "median": round(statistics.median(spans), 3), "max": round(spans[-1], 3),
                "stages_median": {k: round(v, 3) for k, v in stages.items()}}


def stored_session(store: Any, session_id: str) -> Any:
    """A finished problem session read back from the store, shaped as `result_from_session` reads a live one."""
    row = store.session(session_id)
    return SimpleNamespace(session_id=row["id"], store=store, summary=row["summary"] or {},
                           state=SearchState.from_events(row["id"], store.iter_events(row["id"])),
                           config=SimpleNamespace(api_base=(row["config"] or {}).get("api_base"),
                                                  device=(row["config"] or {}).get("device", "")))
