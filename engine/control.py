"""The person's hand on a running loop: pause, resume, stop, skip a target, approval mode and the gate.

The loop runs on one thread and the TUI (or a headless prompt) steers it from another, so every
control is a flag behind one condition variable; the loop only ever blocks in `wait_while_paused`
and `wait_for_approval`, both of which a `stop()` wakes at once. A control never emits its event
itself: it is noted, and the loop thread emits the notes (`drain`) at its next checkpoint, so a
listener or a UI thread may call any control at any time without waiting on the store's lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

APPROVAL_MODES = ("auto", "ask")


@dataclass
class PendingApproval:
    """A candidate that passed and beats the best, waiting for approve or reject."""

    candidate_id: str
    target: str
    speedup: float
    verdict: str | None = None  # approved | rejected
    by: str = "user"


class LoopControl:
    """Thread-safe flags read by the search loop and set by the session's public controls."""

    def __init__(self, approval: str = "auto"):
        if approval not in APPROVAL_MODES:
            raise ValueError(f"approval must be one of {APPROVAL_MODES}, not {approval!r}")
        self._cond = threading.Condition()
        self.approval = approval
        self.paused = False
        self.stop_requested = False
        self.skip_requested = False
        self.pending: PendingApproval | None = None
        self.on_change: Callable[[str, str], None] | None = None  # called by the loop thread in drain()
        self._notes: list[tuple[str, str]] = []

    def note(self, action: str, value: str = "") -> None:
        """Queue a ControlChanged for the loop thread to emit."""
        with self._cond:
            self._notes.append((action, value))

    def drain(self) -> None:
        """Emit the queued control changes (loop thread only; never while holding the lock)."""
        with self._cond:
            notes, self._notes = self._notes, []
        if self.on_change is not None:
            for action, value in notes:
                self.on_change(action, value)

    # -- set from any thread ----------------------------------------------------------------
    def pause(self) -> None:
        with self._cond:
            self.paused = True
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self.paused = False
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self.stop_requested = True
            self._cond.notify_all()

    def skip_target(self) -> None:
        with self._cond:
            self.skip_requested = True
            self._cond.notify_all()

    def set_approval(self, mode: str) -> None:
        """Switching to `auto` while a candidate waits keeps it, as auto mode would have."""
        if mode not in APPROVAL_MODES:
            raise ValueError(f"approval must be one of {APPROVAL_MODES}, not {mode!r}")
        with self._cond:
            self.approval = mode
            if mode == "auto" and self.pending is not None and self.pending.verdict is None:
                self.pending.verdict, self.pending.by = "approved", "engine"
            self._cond.notify_all()

    def decide(self, candidate_id: str, verdict: str) -> bool:
        """Approve or reject the waiting candidate; False if that candidate is not the one waiting."""
        with self._cond:
            if self.pending is None or self.pending.candidate_id != candidate_id or self.pending.verdict:
                return False
            self.pending.verdict, self.pending.by = verdict, "user"
            self._cond.notify_all()
            return True

    # -- read by the loop -------------------------------------------------------------------
    def take_skip(self) -> bool:
        with self._cond:
            skip, self.skip_requested = self.skip_requested, False
            return skip

    def wait_while_paused(self) -> None:
        while True:
            self.drain()
            with self._cond:
                if not self.paused or self.stop_requested:
                    break
                self._cond.wait(0.25)
        self.drain()

    def open_gate(self, candidate_id: str, target: str, speedup: float) -> PendingApproval:
        with self._cond:
            self.pending = PendingApproval(candidate_id, target, speedup)
            return self.pending

    def wait_for_approval(self) -> PendingApproval | None:
        """Block until the waiting candidate is approved or rejected; None if stopped first."""
        pending = self.pending
        while True:
            self.drain()
            with self._cond:
                if pending is None or pending.verdict is not None or self.stop_requested:
                    self.pending = None
                    break
                self._cond.wait(0.25)
        self.drain()
        return pending if pending is not None and pending.verdict else None
