"""The messages between the engine and its worker process (`engine/worker.py`), one class each.

Both sides import these definitions, so a request or a reply is built and read by field name: a typo is
an AttributeError on the spot rather than a key the other side silently never finds. They cross the pipe
pickled, so every class is module-level and holds plain data (or the results dataclasses).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .results import BenchRecord, StageOutcome


# -- requests: engine to worker ----------------------------------------------------------------

@dataclass(frozen=True)
class CheckRequest:
    """Sent to run the five stages on one candidate file (`problem`: a whole-problem ModelNew at `size`)."""

    path: str
    kernel: str
    backend: str
    module: str  # the name the candidate is imported under, new for every request
    extra_shapes: list[dict] = field(default_factory=list)
    problem: str | None = None
    size: str | None = None
    dtypes: list[str] = field(default_factory=list)  # names; empty checks all of the spec's dtypes


@dataclass(frozen=True)
class BenchRequest:
    """Sent to time a candidate that passed against eager and torch.compile, at each of `shapes`."""

    path: str
    kernel: str
    backend: str
    module: str
    shapes: list[dict]
    dtype: str
    with_compile: bool | None = None
    problem: str | None = None
    size: str | None = None


@dataclass(frozen=True)
class Exit:
    """Sent when the engine closes a healthy worker: it returns without answering."""


# -- replies: worker to engine -----------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    """Sent once, when the worker has warmed up and confined itself and waits for its first request."""

    pid: int
    device: str


@dataclass(frozen=True)
class StageStarted:
    """Sent as a check's stage begins, so the engine times that stage against its own timeout."""

    stage: str


@dataclass(frozen=True)
class StageEnded:
    """Sent as a check's stage ends, with its verdict."""

    outcome: StageOutcome


@dataclass(frozen=True)
class Coverage:
    """Sent before a check's stages: the shapes they will not run at full size (CPU interpreter), of how many."""

    skipped_shapes: list[dict]
    shapes_total: int


@dataclass(frozen=True)
class LoadError:
    """Sent when the candidate (or its problem) fails to load: the first stage fails with `reason`."""

    reason: str


@dataclass(frozen=True)
class Record:
    """Sent by a bench for each shape timed."""

    record: BenchRecord


@dataclass(frozen=True)
class Fault:
    """Sent when the device context is broken: the worker exits right after it."""

    reason: str


@dataclass(frozen=True)
class Result:
    """The last answer to every check or bench: `error` ("" when none), and whether the worker exits after
    it (`exiting`: the candidate left something behind that the next one must not share)."""

    error: str = ""
    exiting: bool = False


Request = CheckRequest | BenchRequest | Exit
Reply = Ready | StageStarted | StageEnded | Coverage | LoadError | Record | Fault | Result

# What the engine accepts while it waits on each exchange; anything else is the worker gone wrong.
START_REPLIES = (Ready,)
CHECK_REPLIES = (StageStarted, StageEnded, Coverage, LoadError, Fault, Result)
BENCH_REPLIES = (Record, Fault, Result)
