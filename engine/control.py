"""The person's hand on a running loop: pause, resume, stop, skip a target, approval mode and the gate.

The loop runs on one thread and the TUI (or a headless prompt) steers it from another, so every
control is a flag behind one condition variable; the loop only ever blocks in `wait_while_paused`
and `wait_for_approval`, both of which a `stop()` wakes at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

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
        with self._cond:
            while self.paused and not self.stop_requested:
                self._cond.wait(0.5)

    def open_gate(self, candidate_id: str, target: str, speedup: float) -> PendingApproval:
        with self._cond:
            self.pending = PendingApproval(candidate_id, target, speedup)
            return self.pending

    def wait_for_approval(self) -> PendingApproval | None:
        """Block until the waiting candidate is approved or rejected; None if stopped first."""
        with self._cond:
            pending = self.pending
            while pending is not None and pending.verdict is None and not self.stop_requested:
                self._cond.wait(0.25)
            self.pending = None
            return pending if pending is not None and pending.verdict else None
