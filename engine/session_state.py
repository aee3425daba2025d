"""What the screens show, folded from the session's events: one reducer for live and for replay.

`SessionState.apply(event)` is the only way the state changes, so a replay that feeds the stored
events through it shows exactly what was shown live. `Timeline` holds a stored session's events
with a checkpoint every few hundred, so stepping anywhere (backwards too) folds at most one
checkpoint's worth of events. No UI code here: `autokernel replay` uses it without a screen.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

from . import events as ev
from .fit import NO_FIT
from .worker_board import WorkerBoard

LOG_LINES = 500
TERMINAL_STAGE = ("pass", "fail", "crash", "timeout", "skipped")


def amdahl(share: float, speedup: float) -> float:
    """End-to-end speedup when a fraction `share` of the time runs `speedup` times faster."""
    if speedup <= 0:
        return 1.0
    return 1.0 / ((1.0 - share) + share / speedup)


class Point(NamedTuple):
    """One experiment on the chart: speedup vs eager (None if it failed or was not timed)."""

    experiment: int
    speedup: float | None
    passed: bool
    kept: bool
    candidate_id: str


@dataclass
class RowView:
    """One row of the bottleneck table."""

    index: int
    name: str
    kind: str
    share: float
    self_ms: float
    floor_ms: float | None
    max_speedup: float  # S: the end-to-end bound if this op reached its floor
    kernel_speedup: float | None  # s: now / floor
    best_speedup: float | None = None  # of the kept kernel vs eager, once one is timed
    meaningful: bool = True
    status: str = ""  # "", target, done reason
    # The model's speedup measured with this row's kernel swapped in (the IntegrationResult, with the
    # session's other kept kernels): once there is one it replaces the estimate, until a new best makes it stale.
    e2e_measured: float | None = None
    e2e_meaningful: bool = True

    @property
    def now_ms(self) -> float:
        """The op's time with the best kernel so far (only when the timings mean something)."""
        if self.best_speedup and self.meaningful and self.best_speedup > 0:
            return self.self_ms / self.best_speedup
        return self.self_ms

    @property
    def e2e_now(self) -> float:
        """End-to-end speedup the kept kernel gives already: measured once integrated, else Amdahl with the
        kernel's measured speedup."""
        if self.e2e_measured is not None:
            return self.e2e_measured
        if self.best_speedup and self.meaningful:
            return amdahl(self.share, self.best_speedup)
        return 1.0


@dataclass
class TargetView:
    """One searched bottleneck: its experiments for the chart and its best so far."""

    name: str
    row: int
    shape: dict
    dtype: str
    backend: str
    points: list[Point] = field(default_factory=list)
    frontier: list[tuple[int, float]] = field(default_factory=list)  # (experiment, best speedup so far)
    compile_speedup: float | None = None  # torch.compile vs eager (reference line)
    best_id: str | None = None
    best_speedup: float | None = None
    best_ms: float | None = None
    best_sol: float | None = None  # fraction of the device ceiling of the best
    last_sol: float | None = None
    metric: str = ""
    meaningful: bool = True
    done: str | None = None

    def copy(self) -> "TargetView":
        t = TargetView(**{k: getattr(self, k) for k in self.__dataclass_fields__})
        t.points = list(self.points)
        t.frontier = list(self.frontier)
        return t


@dataclass
class CandidateView:
    """The candidate on screen: its code, its stages, its timing and its fate."""

    candidate_id: str
    experiment: int
    target: str
    label: str
    parent_id: str | None
    source: str
    diff: str
    backend: str
    stages: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # stage -> (status, detail, s)
    bench: dict | None = None
    decision: str | None = None
    decision_by: str = ""
    reason: str = ""

    def copy(self) -> "CandidateView":
        c = CandidateView(**{k: getattr(self, k) for k in self.__dataclass_fields__})
        c.stages = dict(self.stages)
        return c

    def stage(self, name: str) -> tuple[str, str, float]:
        return self.stages.get(name, ("pending", "", 0.0))


@dataclass
class LogLine:
    ts: float
    level: str  # info | warning | error | success
    text: str



def _replaced_text(replaced: list) -> str:
    """'rmsnorm in 9 modules (27 calls), softmax ...' from IntegrationResult.replaced."""
    parts = []
    for r in replaced:
        if not isinstance(r, dict):
            parts.append(str(r))
            continue
        where = f" in {r['modules']} module{'s' if r['modules'] != 1 else ''}" if r.get("modules") else ""
        parts.append(f"{r.get('kind', '?')}{where} ({r.get('calls', 0)} calls"
                     + (f", {r['fallbacks']} fell back" if r.get("fallbacks") else "") + ")")
    return ", ".join(parts) or "nothing"


def model_vs_compile(e: ev.IntegrationResult | None) -> float | None:
    """torch.compile's forward time over our best forward (patched, or patched + torch.compile): the
    model-level result a user who can type torch.compile cares about. None before a correct integration
    that timed torch.compile."""
    if e is None or not e.correct or not e.compile_ms:
        return None
    ours = [ms for ms in (e.model_ms, e.patched_compile_ms) if ms]
    return e.compile_ms / min(ours) if ours else None


def compiled_headline(e: ev.IntegrationResult) -> str:
    """', patched + torch.compile 1.15x vs torch.compile; fastest: patched + torch.compile' (issue 18's
    headline: what a user who can type torch.compile gains); '' for a result without those forwards."""
    from .integrate import FORWARDS

    text = ""
    if e.compile_ms and e.patched_compile_ms:
        text += f", patched + torch.compile {e.compile_ms / e.patched_compile_ms:.2f}x vs torch.compile"
    if e.recommended:
        text += f"; fastest: {FORWARDS.get(e.recommended, e.recommended)}"
    return text


def _row_label(row: dict) -> str:
    """A profile row by its kind, or by its op where the kind says nothing ("other")."""
    kind = row.get("kind") or "?"
    return f"{kind} ({row.get('name')})" if kind == "other" and row.get("name") else kind


def describe(e: ev.Event) -> tuple[str, str] | None:
    """One line for the event log (level, text); None for events that only change panels."""
    if isinstance(e, ev.SessionStarted):
        how = f" ({e.agent}, approval {e.approval})" if e.agent else ""  # a profile has no agent to steer
        return "info", f"session started: {e.kind} {e.model or ''} on {e.device_name or e.device}{how}"
    if isinstance(e, ev.ProfileReady):
        top = ", ".join(f"{_row_label(r)} {100 * float(r.get('share') or 0):.0f}%" for r in e.rows[:3])
        return "info", f"profile ready: {len(e.rows)} ops, {e.total_ms:.3g} ms total; top: {top}"
    if isinstance(e, ev.TargetStarted):
        shape = "×".join(str(v) for v in e.shape.values())
        return "info", f"target {e.target} [{shape}] {e.dtype} ({e.backend})"
    if isinstance(e, ev.IdeaProposed):
        return "info", f"idea {e.idea_id} (tier {e.tier} {e.tier_name}): {e.title}"
    if isinstance(e, ev.CandidateWritten):
        return "info", f"#{e.experiment} {e.candidate_id} written: {e.label}"
    if isinstance(e, ev.StageResult):
        if e.status in ("pass", "running", "pending"):
            return None
        level = "warning" if e.status == "skipped" else "error"
        return level, f"{e.candidate_id} {e.stage}: {e.status}" + (f": {e.detail}" if e.detail else "")
    if isinstance(e, ev.BenchResult):
        note = "" if e.meaningful else " (CPU: not meaningful)"
        comp = f", {e.speedup_compile:.2f}x vs compile" if e.speedup_compile else ""
        copy = f" ({100 * e.achieved / e.copy_gbs:.0f}% of a same-size copy)" if e.copy_gbs and e.achieved else ""
        timing = f"; {e.timing}" if e.timing else ""
        return "info", (f"{e.candidate_id} timed: {e.kernel_ms:.4g} ms, {e.speedup_eager:.2f}x vs eager{comp}, "
                        f"{100 * e.fraction_of_ceiling:.0f}% of {e.metric} ceiling{copy}{note}{timing}")
    if isinstance(e, ev.AwaitingApproval):
        return "warning", f"{e.candidate_id} is {e.speedup:.2f}x faster than the best: approve (a) or reject (r)"
    if isinstance(e, ev.Decision):
        level = {"kept": "success", "discarded": "info", "rejected": "warning", "failed": "error"}.get(e.decision, "info")
        by = " by you" if e.by == "user" else ""
        return level, f"{e.candidate_id} {e.decision}{by}" + (f": {e.reason}" if e.reason else "")
    if isinstance(e, ev.TargetDone):
        best = f", best {e.best_candidate_id} {e.best_speedup:.2f}x" if e.best_candidate_id else ""
        return "success" if e.best_candidate_id else "warning", f"target {e.target} done ({e.reason}){best}"
    if isinstance(e, ev.ControlChanged):
        return "warning", f"control: {e.action}" + (f" {e.value}" if e.value else "")
    if isinstance(e, ev.LLMUsage):
        return "info", f"LLM {e.model}: {e.prompt_tokens}+{e.completion_tokens} tokens, ${e.cost_usd:.4f} (total ${e.total_cost_usd:.4f})"
    if isinstance(e, ev.IntegrationResult):
        if e.detail.startswith(NO_FIT):
            return "warning", f"integration: {e.detail}"
        if not e.correct:
            return "error", f"integration failed: {e.detail or 'outputs differ'} (max abs error {e.max_abs_error:.3g})"
        note = "" if e.meaningful else " (CPU: not meaningful)"
        return "success", (f"integrated {_replaced_text(e.replaced)}: model {e.model_ms:.4g} ms, "
                           f"{e.speedup_eager:.2f}x vs eager{compiled_headline(e)}{note}")
    if isinstance(e, ev.ProblemStarted):
        return "info", f"problem {e.index + 1} {e.name}: session {e.session_id}"
    if isinstance(e, ev.Log):
        return e.level, e.message
    if isinstance(e, ev.ErrorEvent):
        return "error", f"error in {e.where}: {e.message}"
    if isinstance(e, ev.SessionDone):
        return "success" if e.status == "completed" else "warning", f"session {e.status}"
    if isinstance(e, ev.UnknownEvent):
        return "info", f"(event {e.original_type} from a newer version)"
    return None


class SessionState:
    """Everything the live, replay and sessions views show, folded from events (see module doc)."""

    def __init__(self, session_id: str = "", log_lines: int = LOG_LINES):
        self.session_id = session_id
        self.kind = ""
        self.model = ""
        self.device = ""
        self.device_name = ""
        self.agent = ""
        self.approval = "auto"
        self.config: dict = {}
        self.status = "waiting"  # waiting | running | paused | completed | stopped | failed
        self.started_ts: float | None = None
        self.last_ts: float | None = None
        self.total_ms = 0.0
        self.rows: list[RowView] = []
        self.targets: dict[str, TargetView] = {}
        # The target on screen: the oldest open one (the one a skip skips), while others may run beside it;
        # its latest idea and candidate are shown, each open target's are kept for when it is shown.
        self.current_target: str | None = None
        self.idea: ev.IdeaProposed | None = None
        self.candidate: CandidateView | None = None
        self._ideas: dict[str, ev.IdeaProposed | None] = {}
        self._candidates: dict[str, CandidateView] = {}
        self.pending: ev.AwaitingApproval | None = None
        self.experiments = 0  # written
        self.decided = 0
        self.passed = 0
        self.failed = 0
        self.kept = 0
        self.cost_usd = 0.0
        self.tokens = 0
        self.integration: ev.IntegrationResult | None = None
        self.summary: dict = {}
        self.errors = 0
        self.n_events = 0
        self.log: deque[LogLine] = deque(maxlen=log_lines)
        self._bench_of: dict[str, tuple] = {}  # timings of candidates not decided yet
        self.workers = WorkerBoard()  # which worker runs what (a pool's; engine/worker_board.py)

    # -- copying (replay checkpoints) --------------------------------------------------------------
    def copy(self) -> "SessionState":
        """A copy that later `apply` calls on either side cannot disturb (cheap: events are shared)."""
        s = SessionState.__new__(SessionState)
        s.__dict__.update(self.__dict__)
        s.config = dict(self.config)
        s.rows = [RowView(**r.__dict__) for r in self.rows]
        s.targets = {k: t.copy() for k, t in self.targets.items()}
        s.candidate = self.candidate.copy() if self.candidate else None
        s._ideas = dict(self._ideas)
        s._candidates = {k: s.candidate if c is self.candidate else c.copy() for k, c in self._candidates.items()}
        s.log = deque(self.log, maxlen=self.log.maxlen)
        s._bench_of = dict(self._bench_of)
        s.workers = self.workers.copy()
        return s

    # -- derived -----------------------------------------------------------------------------------
    @property
    def target(self) -> TargetView | None:
        return self.targets.get(self.current_target) if self.current_target else None

    @property
    def elapsed_s(self) -> float:
        """Seconds from the first to the last event (the same live and in replay)."""
        if self.started_ts is None or self.last_ts is None:
            return 0.0
        return max(0.0, self.last_ts - self.started_ts)

    def rate_per_hour(self, elapsed_s: float | None = None) -> float:
        el = self.elapsed_s if elapsed_s is None else elapsed_s
        return self.decided * 3600.0 / el if el > 1.0 else 0.0

    def budget_left(self, elapsed_s: float | None = None) -> str:
        """The tightest budget still open, in words ('' when the session has none)."""
        el = self.elapsed_s if elapsed_s is None else elapsed_s
        parts = []
        if self.config.get("budget_s"):
            parts.append(f"{format_duration(max(0.0, float(self.config['budget_s']) - el))} left")
        if self.config.get("max_experiments"):
            parts.append(f"{max(0, int(self.config['max_experiments']) - self.experiments)} exp left")
        if self.config.get("max_cost_usd"):
            parts.append(f"${max(0.0, float(self.config['max_cost_usd']) - self.cost_usd):.2f} left")
        return ", ".join(parts)

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "stopped", "failed")

    # -- the reducer -------------------------------------------------------------------------------
    def apply(self, e: ev.Event) -> "SessionState":
        """Fold one event in; returns self so a fold reads `state.apply(a).apply(b)`."""
        self.n_events += 1
        if self.started_ts is None:
            self.started_ts = e.ts
        self.last_ts = e.ts if self.last_ts is None else max(self.last_ts, e.ts)
        handler = _HANDLERS.get(type(e))
        if handler is not None:
            handler(self, e)
        self.workers.apply(e)
        line = describe(e)
        if line is not None:
            self.log.append(LogLine(e.ts, line[0], line[1]))
        return self

    def _on_started(self, e: ev.SessionStarted) -> None:
        self.started_ts = e.ts
        self.kind, self.model, self.device, self.device_name = e.kind, e.model, e.device, e.device_name
        self.agent, self.approval, self.config = e.agent, e.approval, dict(e.config or {})
        self.status = "running"

    def _on_profile(self, e: ev.ProfileReady) -> None:
        self.total_ms = float(e.total_ms or 0.0)
        self.rows = [_row_view(i, r) for i, r in enumerate(e.rows)]

    def _shows(self, target: str) -> bool:
        """Whether `target` is, or now becomes, the one on screen: no other open target is older."""
        t = self.target
        return t is None or t.done is not None or t.name == target

    def _show(self, target: str) -> None:
        """Put `target` on screen with its latest idea and candidate (the last candidate stays until it has one)."""
        self.current_target = target
        self.idea = self._ideas.get(target)
        self.candidate = self._candidates.get(target, self.candidate)

    def _views(self, candidate_id: str) -> list[CandidateView]:
        """The views of a candidate (on screen, or its target's latest) that its events update."""
        views = [c for c in (self.candidate, *self._candidates.values()) if c is not None and c.candidate_id == candidate_id]
        return list({id(c): c for c in views}.values())

    def _on_target(self, e: ev.TargetStarted) -> None:
        if e.target not in self.targets:
            self.targets[e.target] = TargetView(e.target, e.row, dict(e.shape), e.dtype, e.backend)
        self._ideas[e.target] = None
        if self._shows(e.target):
            self._show(e.target)
        open_rows = {t.row for t in self.targets.values() if t.done is None}
        for r in self.rows:
            if r.status == "target" and r.index not in open_rows:
                r.status = ""
        if 0 <= e.row < len(self.rows):
            self.rows[e.row].status = "target"

    def _on_idea(self, e: ev.IdeaProposed) -> None:
        self._ideas[e.target] = e
        if e.target not in self.targets or self._shows(e.target):
            self.idea = e

    def _on_candidate(self, e: ev.CandidateWritten) -> None:
        view = CandidateView(e.candidate_id, e.experiment, e.target, e.label, e.parent_id, e.source, e.diff, e.backend)
        self.experiments = max(self.experiments, e.experiment)
        if not e.idea_id:  # the starter: no idea behind it
            self._ideas[e.target] = None
        if e.target not in self.targets:
            self.candidate = view
            return
        self._candidates[e.target] = view
        if self._shows(e.target):
            self._show(e.target)

    def _on_stage(self, e: ev.StageResult) -> None:
        for c in self._views(e.candidate_id):
            c.stages[e.stage] = (e.status, e.detail, e.seconds)

    def _on_bench(self, e: ev.BenchResult) -> None:
        for c in self._views(e.candidate_id):
            c.bench = dict(vars(e))  # shallow: events are never changed after they are made
        t = self.targets.get(e.target)
        if t is not None:
            t.last_sol = e.fraction_of_ceiling
            t.metric = e.metric
            t.meaningful = e.meaningful
            if e.speedup_compile and e.speedup_eager and e.speedup_compile > 0:
                t.compile_speedup = e.speedup_eager / e.speedup_compile  # compile's own speedup vs eager
            elif e.compile_ms and e.eager_ms:
                t.compile_speedup = e.eager_ms / e.compile_ms
            self._bench_of[e.candidate_id] = (e.speedup_eager, e.kernel_ms, e.fraction_of_ceiling, e.meaningful)

    def _on_awaiting(self, e: ev.AwaitingApproval) -> None:
        self.pending = e

    def _on_decision(self, e: ev.Decision) -> None:
        if self.pending is not None and self.pending.candidate_id == e.candidate_id:
            self.pending = None
        views = self._views(e.candidate_id)
        for v in views:
            v.decision, v.decision_by, v.reason = e.decision, e.by, e.reason
        c = views[0] if views else None
        self.decided += 1
        if e.decision == "failed":
            self.failed += 1
        else:
            self.passed += 1
        t = self.targets.get(e.target)
        if t is None:
            return
        bench = self._bench_of.pop(e.candidate_id, None)
        experiment = c.experiment if c is not None and c.candidate_id == e.candidate_id else _experiment_of(e.candidate_id)
        speedup = bench[0] if bench else None
        kept = e.decision == "kept"
        t.points.append(Point(experiment, speedup, e.decision != "failed", kept, e.candidate_id))
        if kept:
            self.kept += 1
            t.best_id = e.candidate_id
            if bench:
                t.best_speedup, t.best_ms, t.best_sol, t.meaningful = bench
            t.frontier.append((experiment, t.best_speedup or 0.0))
            for r in self.rows:
                if r.index == t.row:
                    r.best_speedup, r.meaningful = t.best_speedup, t.meaningful
                    r.e2e_measured = None  # the integration timed the kernel this one replaces

    def _on_target_done(self, e: ev.TargetDone) -> None:
        t = self.targets.get(e.target)
        if t is not None:
            t.done = e.reason or "done"
            if 0 <= t.row < len(self.rows):
                self.rows[t.row].status = t.done
        if self.pending is not None and self.pending.target == e.target:
            self.pending = None
        if self.current_target == e.target:  # the next open target, if one runs already, is shown
            following = next((name for name, t in self.targets.items() if t.done is None), None)
            if following is not None:
                self._show(following)

    def _on_control(self, e: ev.ControlChanged) -> None:
        if e.action == "pause":
            self.status = "paused"
        elif e.action in ("resume", "resume_session"):
            self.status = "running"
        elif e.action == "approval" and e.value:
            self.approval = e.value
            if e.value == "auto":
                self.pending = None
        elif e.action == "stop":
            self.status = "stopping"

    def _on_usage(self, e: ev.LLMUsage) -> None:
        self.cost_usd = max(self.cost_usd, e.total_cost_usd)
        self.tokens += e.prompt_tokens + e.completion_tokens

    def _on_integration(self, e: ev.IntegrationResult) -> None:
        """The searched rows whose kernel was swapped in show the measured model speedup (failed: none)."""
        self.integration = e
        # speedup_eager is the patched eager forward's, with the kinds its subset chose ("chosen"; all of them in
        # a record from before the subset search)
        swapped = {r.get("kind") for r in e.replaced if isinstance(r, dict) and "patched" in r.get("chosen", ["patched"])} \
            if e.correct and e.speedup_eager else set()
        rows = {t.row: name for name, t in self.targets.items()}
        for r in self.rows:
            measured = rows.get(r.index) in swapped
            r.e2e_measured = float(e.speedup_eager) if measured else None
            r.e2e_meaningful = bool(e.meaningful)

    def _on_error(self, e: ev.ErrorEvent) -> None:
        self.errors += 1

    def _on_done(self, e: ev.SessionDone) -> None:
        self.status = e.status
        self.summary = dict(e.summary or {})
        self.pending = None


_HANDLERS = {
    ev.SessionStarted: SessionState._on_started,
    ev.ProfileReady: SessionState._on_profile,
    ev.TargetStarted: SessionState._on_target,
    ev.IdeaProposed: SessionState._on_idea,
    ev.CandidateWritten: SessionState._on_candidate,
    ev.StageResult: SessionState._on_stage,
    ev.BenchResult: SessionState._on_bench,
    ev.AwaitingApproval: SessionState._on_awaiting,
    ev.Decision: SessionState._on_decision,
    ev.TargetDone: SessionState._on_target_done,
    ev.ControlChanged: SessionState._on_control,
    ev.LLMUsage: SessionState._on_usage,
    ev.IntegrationResult: SessionState._on_integration,
    ev.ErrorEvent: SessionState._on_error,
    ev.SessionDone: SessionState._on_done,
}


def _experiment_of(candidate_id: str) -> int:
    """Candidate ids end in the experiment number (`softmax-0007`); 0 if not."""
    tail = candidate_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _num(v: Any, default: float | None = 0.0) -> float | None:
    try:
        return float(v) if v is not None else default
    except (TypeError, ValueError):
        return default


def _row_view(i: int, r: dict) -> RowView:
    share = _num(r.get("share"), 0.0) or 0.0
    kernel_s = _num(r.get("kernel_speedup"), None)
    max_s = _num(r.get("max_speedup"), None)
    if max_s is None:
        max_s = amdahl(share, kernel_s) if kernel_s else 1.0
    return RowView(index=i, name=str(r.get("name") or r.get("kind") or "?"), kind=str(r.get("kind") or "?"),
                   share=share, self_ms=_num(r.get("self_ms"), 0.0) or 0.0, floor_ms=_num(r.get("floor_ms"), None),
                   max_speedup=max_s, kernel_speedup=kernel_s)


def format_duration(seconds: float) -> str:
    s = int(max(0, seconds))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def fold(events: Iterable[ev.Event], session_id: str = "") -> SessionState:
    state = SessionState(session_id)
    for e in events:
        state.apply(e)
    return state


class Timeline:
    """A stored session's events with checkpoints, so any position folds in O(every) events.

    Position `i` means the first `i` events applied (0: nothing yet, len: the whole session).
    """

    def __init__(self, events: list[ev.Event], session_id: str = "", every: int = 250):
        self.events = events
        self.session_id = session_id
        self.every = max(1, every)
        self.checkpoints: list[SessionState] = []
        self.experiment_at: dict[int, int] = {}  # experiment number -> position just after its CandidateWritten
        state = SessionState(session_id)
        for i, e in enumerate(events):
            if i % self.every == 0:
                self.checkpoints.append(state.copy())
            state.apply(e)
            if isinstance(e, ev.CandidateWritten):
                self.experiment_at.setdefault(e.experiment, i + 1)
        self.final = state
        self._experiments = sorted(self.experiment_at)

    def __len__(self) -> int:
        return len(self.events)

    def state_at(self, position: int) -> SessionState:
        """The state after the first `position` events (a fresh object the caller may keep)."""
        position = max(0, min(position, len(self.events)))
        if position == len(self.events):
            return self.final.copy()
        k = min(position // self.every, len(self.checkpoints) - 1) if self.checkpoints else -1
        if k < 0:
            return SessionState(self.session_id)
        state = self.checkpoints[k].copy()
        for e in self.events[k * self.every: position]:
            state.apply(e)
        return state

    def position_of_experiment(self, n: int) -> int | None:
        """Where experiment `n` (or the nearest one after it) was written; None past the last."""
        if n in self.experiment_at:
            return self.experiment_at[n]
        j = bisect.bisect_left(self._experiments, n)
        return self.experiment_at[self._experiments[j]] if j < len(self._experiments) else None

    def next_experiment(self, position: int, direction: int) -> int:
        """The position of the next (+1) or previous (-1) experiment from `position`."""
        positions = sorted(self.experiment_at.values())
        if direction > 0:
            j = bisect.bisect_right(positions, position)
            return positions[j] if j < len(positions) else len(self.events)
        j = bisect.bisect_left(positions, position) - 1
        return positions[j] if j >= 0 else 0


def load_timeline(store: Any, ref: str, every: int = 250) -> tuple[dict, Timeline]:
    """A session row (by id, prefix or `latest`) and its timeline, read from the store alone."""
    row = store.session(ref)
    events = [e for _, e in store.events(row["id"])]
    return row, Timeline(events, row["id"], every=every)
