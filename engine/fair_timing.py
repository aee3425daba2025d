"""When the wall clock overrules the CUDA events, and how the candidate and its baselines are then compared.

On a GPU each call is timed with CUDA events and a wall-clock batch cross-checks the candidate. When the
batch is much slower than the events (work that escapes the timed stream, or a launcher slower on the
host than the kernel on the GPU), the events cannot be trusted for the candidate, and comparing its wall
clock with eager's events would charge it host time that eager is never charged (H100: a one-row-per-
program softmax, events 0.029 ms, wall clock 0.104 ms, reported 0.56x eager). So eager and torch.compile
are then timed by the same wall-clock batches, and speedups compare like with like. Pure functions over
measured numbers, so the decision is tested on CPU with made-up timings (tests/test_timing.py).
"""

from __future__ import annotations

from dataclasses import dataclass

SIDE_STREAM_SLACK = 1.5  # the wall clock may exceed the events by this factor (plus SLACK_MS) before it overrules
SLACK_MS = 0.05
# A batch whose host loop (the launches, before the closing synchronize) took this share of its wall clock
# or more was waiting on the host: launch-bound. Less, and the GPU still had work queued that the events
# did not see. Only the reason's wording depends on it: the comparison is wall clock against wall clock either way.
LAUNCH_BOUND_SHARE = 0.8
WALL_LOOKS = 3  # batches per wall-clock look; the fastest counts (a host hiccup is not the kernel's)

EVENTS, WALL = "events", "wall clock"
LAUNCH_BOUND, ESCAPES = "launch-bound", "work escapes the events"
NAMES = ("candidate", "eager", "torch.compile")


@dataclass(frozen=True)
class WallLook:
    """One wall-clock batch, per call: `wall_ms` up to the closing whole-device synchronize, `host_ms`
    up to the last launch returning (before the synchronize)."""

    wall_ms: float
    host_ms: float


def batch_size(event_ms: float) -> int:
    """Calls per wall-clock batch: about 50 ms of events' worth, 5 to 200, so a launch-bound function and
    its baselines are each timed over a batch long enough to average out the host's jitter."""
    return max(5, min(200, int(50 / max(event_ms, 1e-3))))


def overrules(event_ms: float, wall_ms: float) -> bool:
    """Whether the wall clock is too far above the events for the events to be believed."""
    return wall_ms > SIDE_STREAM_SLACK * event_ms + SLACK_MS


def fastest(looks: list[WallLook | None]) -> WallLook | None:
    """The look with the lowest wall clock (None if none was taken): a slow batch is the host's hiccup,
    never the kernel's gain."""
    taken = [w for w in looks if w is not None]
    return min(taken, key=lambda w: w.wall_ms) if taken else None


def reason(look: WallLook) -> str:
    """Why the wall clock overruled: the host was the bottleneck (launch-bound), or the GPU still had
    work the events did not time (escaping work: a side stream, or a cheat)."""
    return LAUNCH_BOUND if look.host_ms >= LAUNCH_BOUND_SHARE * look.wall_ms else ESCAPES


@dataclass
class Times:
    """Each function's events ms and wall-clock look per call ('candidate', 'eager', 'torch.compile'; None:
    not timed). The comparison is fair both ways: once the wall clock overrules the events for any of the
    three, all three are compared by their wall clocks (a launch-bound eager at a tiny shape must not make
    the candidate's events look fast either)."""

    events: dict[str, float | None]
    wall: dict[str, WallLook | None]

    def overruled(self) -> list[str]:
        """The functions whose wall clock overrules their events, the candidate first."""
        return [n for n in NAMES if self.events.get(n) is not None and self.wall.get(n) is not None
                and overrules(self.events[n], self.wall[n].wall_ms)]

    def method(self) -> str:
        return WALL if self.overruled() else EVENTS

    def reason(self) -> str:
        """'' under the events; the candidate's reason when it was overruled, else the baseline's, named."""
        names = self.overruled()
        if not names:
            return ""
        why = reason(self.wall[names[0]])
        return why if names[0] == "candidate" else f"{names[0]} {why}"

    def reported(self, method: str | None = None) -> dict[str, float | None]:
        """The times the speedups use, all three by the same method (`method`: one decided on an earlier
        look; this look's by default). A function the method did not time has no time rather than the
        other method's."""
        return self.ms("events" if (method or self.method()) == EVENTS else "wall")

    def ms(self, which: str) -> dict[str, float | None]:
        """Per function, the 'events' or the 'wall' ms (None: not taken)."""
        if which == "events":
            return {n: self.events.get(n) for n in NAMES}
        return {n: (self.wall[n].wall_ms if self.wall.get(n) is not None else None) for n in NAMES}

    def record_fields(self, method: str | None = None, why: str | None = None) -> dict:
        """BenchRecord's fields for both methods' numbers and the choice (`timed_by`, `timing_reason`);
        `method` and `why`: decided on an earlier look (this look's by default)."""
        method, ev, wall = method or self.method(), self.ms("events"), self.ms("wall")
        return {"timed_by": method, "timing_reason": (why or self.reason()) if method == WALL else "",
                "kernel_event_ms": ev["candidate"], "kernel_wall_ms": wall["candidate"],
                "eager_event_ms": ev["eager"], "eager_wall_ms": wall["eager"],
                "compile_event_ms": ev["torch.compile"], "compile_wall_ms": wall["torch.compile"]}


def combine(first: Times, second: Times) -> tuple[Times, str, str]:
    """The two looks of `bench` as one: (the times, the method, its reason). Once the first look's wall
    clock overrules, the second look is wall clocks only and the fastest wall look of each counts (the
    events are the first look's); otherwise the lower events of each, against the first look's wall
    clocks, so a second look faster than the wall clock allows is overruled too. A slowdown is never the
    kernel's gain.

    The method and reason are decided on the chosen times, the ones recorded, never on the first look
    alone: a first wall look slowed by a host hiccup that a faster one shows to be within the events'
    slack leaves the events standing, so a record's `timed_by` always follows from its own numbers."""
    if first.method() == WALL:
        chosen = Times(events=first.ms("events"), wall={n: fastest([first.wall.get(n), second.wall.get(n)]) for n in NAMES})
    else:
        lower = {n: min((x for x in (first.events.get(n), second.events.get(n)) if x is not None), default=None)
                 for n in NAMES}
        chosen = Times(events=lower, wall={n: first.wall.get(n) for n in NAMES})
    return chosen, chosen.method(), chosen.reason()


def speedup(baseline_ms: float | None, kernel_ms: float | None) -> float | None:
    """baseline / candidate, both timed by the same method; None when either is missing."""
    return baseline_ms / kernel_ms if (baseline_ms and kernel_ms) else None


def _ms(x: float | None) -> str:
    return f"{x:.3g} ms" if x is not None else "no time"


def timing_line(rec) -> str:
    """One line saying how a record was timed, when not by the events alone (for the report, TUI and
    headless line), e.g. 'launch-bound: wall clock 0.104 ms vs eager 0.06 ms wall (events 0.029 vs 0.058)';
    '' when the events stand (or on CPU)."""
    if getattr(rec, "timed_by", EVENTS) != WALL:
        return ""
    ev = f"events {rec.kernel_event_ms:.3g} vs {rec.eager_event_ms:.3g}" if (
        rec.kernel_event_ms is not None and rec.eager_event_ms is not None) else "events not taken"
    line = (f"{rec.timing_reason or 'wall clock'}: wall clock {_ms(rec.kernel_wall_ms)} vs eager "
            f"{_ms(rec.eager_wall_ms)} wall ({ev})")
    if rec.compile_wall_ms is not None:
        comp_ev = f" (events {rec.compile_event_ms:.3g})" if rec.compile_event_ms is not None else ""
        line += f", torch.compile {_ms(rec.compile_wall_ms)} wall{comp_ev}"
    return line
