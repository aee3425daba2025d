"""Which worker is doing what, folded from the events: the TUI's workers line, the headless one, replay.

Each StageResult and BenchResult names the worker that produced it (`worker`, `worker_device`), so the fold
knows, per worker, the experiment it runs now, how many it has finished and since when it has been working;
a replay of the stored events shows the same board as the live run did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import events as ev


@dataclass
class WorkerView:
    label: str
    device: str
    running: str = ""  # "softmax-0004 shape_sweep", "softmax-0004 timing", or "" when idle
    done: int = 0  # experiments decided after this worker ran them
    first_ts: float | None = None  # its first event: experiments per hour count from here

    def per_hour(self, now: float) -> float:
        span = now - (self.first_ts if self.first_ts is not None else now)
        return self.done * 3600.0 / span if span > 1.0 else 0.0


@dataclass
class WorkerBoard:
    """The fold (`apply(event)`); `workers` in the order they were first seen."""

    workers: dict[str, WorkerView] = field(default_factory=dict)
    _of: dict[str, str] = field(default_factory=dict)  # candidate id -> the worker that last ran it

    def copy(self) -> "WorkerBoard":
        return WorkerBoard({k: WorkerView(**vars(w)) for k, w in self.workers.items()}, dict(self._of))

    def __len__(self) -> int:
        return len(self.workers)

    def apply(self, e: ev.Event) -> None:
        if isinstance(e, (ev.StageResult, ev.BenchResult)) and e.worker:
            w = self.workers.get(e.worker)
            if w is None:
                w = self.workers[e.worker] = WorkerView(e.worker, e.worker_device, first_ts=e.ts)
            self._of[e.candidate_id] = e.worker
            if isinstance(e, ev.BenchResult):
                w.running = f"{e.candidate_id} timed"
            else:
                w.running = f"{e.candidate_id} {e.stage}" + ("" if e.status == "running" else f" {e.status}")
        elif isinstance(e, ev.Decision):
            w = self.workers.get(self._of.pop(e.candidate_id, ""))
            if w is not None:
                w.done += 1
                w.running = ""
        elif isinstance(e, ev.SessionDone):
            for w in self.workers.values():
                w.running = ""

    def line(self, now: float, width: int | None = None) -> str:
        """One line for every worker: `gpu0 softmax-0004 smoke 3 done 40/h │ gpu1 idle 2 done 30/h`."""
        parts = [f"{w.label} {w.running or 'idle'} {w.done} done {w.per_hour(now):.0f}/h" for w in self.workers.values()]
        text = " │ ".join(parts)
        if width is not None and len(text) > width:  # keep every worker: drop what each runs first
            text = " │ ".join(f"{w.label} {w.done}/{w.per_hour(now):.0f}h" for w in self.workers.values())
        return text

    def describe(self, now: float) -> list[str]:
        """A line per worker with its device, for the headless printer and `--json`-less summaries."""
        return [f"{w.label} ({w.device or '?'}): {w.running or 'idle'}, {w.done} experiments, "
                f"{w.per_hour(now):.0f}/h" for w in self.workers.values()]
