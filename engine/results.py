"""What the harness and the timer report about a candidate; plain dataclasses that go to JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .coverage import describe

# The five stages, in order. A candidate must pass all of them before it is timed.
STAGES = ("smoke", "shape_sweep", "stability", "determinism", "edge_cases")

# Stage status values. crash/timeout mean the worker process died or hung on this stage.
PASS, FAIL, CRASH, TIMEOUT, SKIPPED, RUNNING, PENDING = "pass", "fail", "crash", "timeout", "skipped", "running", "pending"


@dataclass
class StageOutcome:
    name: str
    status: str  # pass | fail | crash | timeout | skipped
    detail: str = ""  # plain reason on failure; what was covered on success
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "status": self.status, "detail": self.detail, "seconds": round(self.seconds, 3)}


@dataclass
class CheckReport:
    """The verdict of the five stages on one candidate."""

    kernel: str
    backend: str
    device: str
    candidate: str  # path or label
    stages: list[StageOutcome] = field(default_factory=list)
    error: str = ""  # why the candidate could not even be loaded (syntax error, missing kernel_fn, ...)
    # Shapes of the stages not run at full size (too large for the CPU interpreter), each
    # {"shape": {...}, "checked_as": the smaller stand-in that ran, or None}; and how many distinct
    # shapes the stages name. A pass with skipped shapes is a pass of what ran, never of all five stages.
    skipped_shapes: list[dict] = field(default_factory=list)
    shapes_total: int = 0

    @property
    def passed(self) -> bool:
        return len(self.stages) == len(STAGES) and all(s.passed for s in self.stages) and not self.error

    @property
    def first_failure(self) -> StageOutcome | None:
        return next((s for s in self.stages if not s.passed and s.status != SKIPPED), None)

    def coverage(self) -> str:
        """What a pass covered, for the verdict line: 'all five stages', or the five stages on N of M shapes
        with every shape not run at full size named (and how it was checked, if at all)."""
        if not self.skipped_shapes:
            return "all five stages"
        full = max(self.shapes_total - len(self.skipped_shapes), 0)
        return (f"the five stages on {full} of {self.shapes_total} shapes at full size "
                f"({describe(self.skipped_shapes)}; run on a GPU to check them)")

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "coverage": self.coverage() if self.passed else "",
            "skipped_shapes": self.skipped_shapes,
            "kernel": self.kernel,
            "backend": self.backend,
            "device": self.device,
            "candidate": self.candidate,
            "error": self.error,
            "stages": [s.to_json() for s in self.stages],
        }


@dataclass
class BenchRecord:
    """One timed (kernel, shape, dtype): the candidate, eager and torch.compile, measured in one run."""

    kernel: str
    backend: str
    shape: dict
    dtype: str
    device_name: str
    kernel_ms: float
    eager_ms: float
    compile_ms: float | None
    metric: str  # GB/s | TFLOP/s
    achieved: float  # in metric units
    ceiling: float  # the device's measured ceiling in the same units
    fraction_of_ceiling: float
    speedup_eager: float
    speedup_compile: float | None
    meaningful: bool  # False on CPU: the interpreter's times say nothing about a GPU
    eager_achieved: float = 0.0
    compile_achieved: float | None = None
    note: str = ""  # e.g. why torch.compile has no time, or that the wall clock overruled the events
    # what "eager" and "torch.compile" ran: the spec's idiomatic PyTorch in the inputs' dtype
    # ("idiomatic"), or its fp32 reference where that is how users write the op ("reference")
    baseline: str = "reference"
    # GB/s of a plain device copy moving the same bytes (GB/s kernels on a GPU): full bandwidth at this size
    copy_gbs: float | None = None
    # How the GPU times above were taken (engine/fair_timing.py): "events", or "wall clock" once the wall
    # clock overruled the events (then for all three alike, so speedups compare like with like), with the
    # reason ("launch-bound", "work escapes the events") and both methods' numbers; "" on CPU.
    timed_by: str = ""
    timing_reason: str = ""
    kernel_event_ms: float | None = None
    kernel_wall_ms: float | None = None
    eager_event_ms: float | None = None
    eager_wall_ms: float | None = None
    compile_event_ms: float | None = None
    compile_wall_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
