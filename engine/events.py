"""The one stream of typed events a session emits.

Every event is written to the store first, then handed to listeners (the live TUI, the headless
printer). Replay reads the same events back and feeds the same reducer, so what replay shows is
exactly what was shown live. Events are plain dataclasses that round-trip through JSON.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

_REGISTRY: dict[str, type["Event"]] = {}


@dataclass
class Event:
    """Base of all events. `type` names the subclass in the store; `ts` is wall-clock seconds."""

    type: ClassVar[str] = "event"
    ts: float = field(default_factory=time.time, kw_only=True)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        _REGISTRY[cls.type] = cls

    def payload(self) -> dict[str, Any]:
        """The JSON-able fields of the event, without `ts` (stored in its own column)."""
        d = dataclasses.asdict(self)
        d.pop("ts", None)
        return d

    @staticmethod
    def from_row(type_: str, payload: dict[str, Any], ts: float) -> "Event":
        cls = _REGISTRY.get(type_)
        if cls is None:  # an event from a newer version: keep it readable, don't crash replay
            return UnknownEvent(original_type=type_, data=payload, ts=ts)
        names = _field_names(cls)
        return cls(**{k: v for k, v in payload.items() if k in names}, ts=ts)


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> frozenset[str]:
    """The fields of an event class, computed once (replay reads tens of thousands of rows)."""
    return frozenset(f.name for f in dataclasses.fields(cls))


@dataclass
class UnknownEvent(Event):
    type: ClassVar[str] = "unknown"
    original_type: str = ""
    data: dict = field(default_factory=dict)


@dataclass
class SessionStarted(Event):
    """A session began: what it runs on and how it was asked to run."""

    type: ClassVar[str] = "session_started"
    kind: str = "optimize"  # profile | optimize | bench | check | kernelbench
    model: str = ""
    device: str = ""
    device_name: str = ""
    agent: str = ""
    approval: str = "auto"
    config: dict = field(default_factory=dict)


@dataclass
class ProfileReady(Event):
    """The Amdahl-ranked profile of the model (rows as in `autokernel profile --json`)."""

    type: ClassVar[str] = "profile_ready"
    device: str = ""
    total_ms: float = 0.0
    rows: list = field(default_factory=list)


@dataclass
class TargetStarted(Event):
    """The loop moved to a new bottleneck. `baseline` holds the starter's and the references' timings."""

    type: ClassVar[str] = "target_started"
    target: str = ""  # kernel type, e.g. "rmsnorm"
    row: int = 0  # index in the ranked profile
    shape: dict = field(default_factory=dict)
    dtype: str = ""
    backend: str = "triton"
    baseline: dict = field(default_factory=dict)


@dataclass
class IdeaProposed(Event):
    """The agent's idea in words: its playbook tier and the hypothesis grounded in a measurement."""

    type: ClassVar[str] = "idea_proposed"
    idea_id: str = ""
    target: str = ""
    agent: str = ""
    tier: int = 0
    tier_name: str = ""
    title: str = ""
    hypothesis: str = ""
    parent_id: str | None = None
    round: int = 0  # the search round on this target (seeds of round n come from rounds < n)


@dataclass
class CandidateWritten(Event):
    """One code variant of an idea, with its full source and its diff against the parent."""

    type: ClassVar[str] = "candidate_written"
    candidate_id: str = ""
    idea_id: str = ""
    experiment: int = 0  # 1-based experiment number within the session
    target: str = ""
    backend: str = "triton"
    label: str = ""
    parent_id: str | None = None
    source: str = ""
    diff: str = ""
    params: dict = field(default_factory=dict)  # the variant's parameters (agents read them back)


@dataclass
class StageResult(Event):
    """A harness stage changed state: running, pass, fail, crash or timeout (with a plain reason)."""

    type: ClassVar[str] = "stage_result"
    candidate_id: str = ""
    stage: str = ""  # smoke | shape_sweep | stability | determinism | edge_cases
    status: str = "running"
    detail: str = ""
    seconds: float = 0.0
    dtypes: list = field(default_factory=list)  # screened in these dtypes only; empty: every dtype of the spec
    worker: str = ""  # the worker that ran it (its label: "cpu", "gpu3", "ray:host/gpu1"); "" if not known
    worker_device: str = ""  # the device that worker owns ("cuda:3", "cpu")


@dataclass
class BenchResult(Event):
    """Timing of a candidate that passed every stage, against eager and torch.compile in the same run."""

    type: ClassVar[str] = "bench_result"
    candidate_id: str = ""
    target: str = ""
    shape: dict = field(default_factory=dict)
    dtype: str = ""
    device_name: str = ""
    kernel_ms: float = 0.0
    eager_ms: float = 0.0
    compile_ms: float | None = None
    metric: str = "GB/s"
    achieved: float = 0.0  # in `metric` units
    ceiling: float = 0.0  # measured device ceiling, same units
    fraction_of_ceiling: float = 0.0
    speedup_eager: float = 0.0
    speedup_compile: float | None = None
    meaningful: bool = True  # False on CPU / under the Triton interpreter
    copy_gbs: float | None = None  # a plain device copy of the same bytes (GB/s), memory-bound kernels on CUDA
    # how the times were taken when not by the CUDA events alone (`fair_timing.timing_line`), e.g.
    # "launch-bound: wall clock 0.104 ms vs eager 0.06 ms wall (events 0.029 vs 0.058)"; "" otherwise
    timing: str = ""
    worker: str = ""  # the worker that timed it, and its device (as in StageResult)
    worker_device: str = ""


@dataclass
class AwaitingApproval(Event):
    """A passing candidate beats the best and waits for the person (approval mode `ask`)."""

    type: ClassVar[str] = "awaiting_approval"
    candidate_id: str = ""
    target: str = ""
    speedup: float = 0.0


@dataclass
class Decision(Event):
    """What became of a candidate: kept (new best), discarded, approved, rejected, failed."""

    type: ClassVar[str] = "decision"
    candidate_id: str = ""
    target: str = ""
    decision: str = ""  # kept | discarded | rejected | failed
    reason: str = ""
    by: str = "engine"  # engine | user


@dataclass
class TargetDone(Event):
    type: ClassVar[str] = "target_done"
    target: str = ""
    best_candidate_id: str | None = None
    best_speedup: float = 0.0
    # plateau | ceiling | budget | skipped | exhausted | failed (the starter failed its checks)
    # | untimed (the starter passed but could not be timed) | no-fit (out of memory: engine/fit.py)
    reason: str = ""


@dataclass
class ControlChanged(Event):
    """The person (or a budget) changed how the loop runs: pause, resume, approval mode, skip, stop."""

    type: ClassVar[str] = "control"
    action: str = ""
    value: str = ""


@dataclass
class LLMUsage(Event):
    type: ClassVar[str] = "llm_usage"
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    total_cost_usd: float = 0.0


@dataclass
class IntegrationResult(Event):
    """The kept kernels swapped into the model: outputs checked, timed end to end."""

    type: ClassVar[str] = "integration_result"
    replaced: list = field(default_factory=list)
    correct: bool = False
    max_abs_error: float = 0.0
    detail: str = ""
    model_ms: float = 0.0
    eager_ms: float = 0.0
    compile_ms: float | None = None
    speedup_eager: float = 0.0
    speedup_compile: float | None = None
    meaningful: bool = True
    spread: float | None = None  # largest spread of the interleaved rounds' medians (eager, patched, compile)
    sites: list = field(default_factory=list)  # [{site, before_ms, after_ms}]: swapped modules, then "rest"
    round_speedups: dict = field(default_factory=dict)  # {"eager"|"compile": [baseline / patched, per round]}
    patched_compile_ms: float | None = None  # torch.compile of the patched model (None: not run, or it failed)
    recommended: str = ""  # the fastest correct forward: eager | compile | patched | patched_compile
    phase_seconds: dict = field(default_factory=dict)  # where the integration's wall time went: {phase: s}


@dataclass
class Log(Event):
    """A line for the event log that carries no state of its own."""

    type: ClassVar[str] = "log"
    level: str = "info"
    message: str = ""


@dataclass
class ErrorEvent(Event):
    type: ClassVar[str] = "error"
    where: str = ""
    message: str = ""


@dataclass
class ProblemStarted(Event):
    """A KernelBench batch handed problem `index` to its own optimize session: a resumed batch finds
    the session of a problem cut mid-way here."""

    type: ClassVar[str] = "problem_started"
    index: int = 0
    name: str = ""
    path: str = ""
    session_id: str = ""


@dataclass
class ProblemDone(Event):
    """A KernelBench problem's row of the score table (`ProblemResult.to_json()`), as the batch counted
    it: a resumed batch keeps it rather than running the problem again."""

    type: ClassVar[str] = "problem_done"
    index: int = 0
    result: dict = field(default_factory=dict)


@dataclass
class SessionDone(Event):
    type: ClassVar[str] = "session_done"
    status: str = "completed"  # completed | stopped | failed
    summary: dict = field(default_factory=dict)


def event_types() -> dict[str, type[Event]]:
    return dict(_REGISTRY)
