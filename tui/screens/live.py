"""The live screen: a running session, its panels updated ~15 times a second, steered by keys.

The engine runs `session.run()` on a worker thread and calls `EventInbox.push` for every event
(after the store has it). The inbox only appends to a deque, so the engine never waits for the
screen; a timer drains it and redraws once per tick however many events arrived (coalescing).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

from textual.binding import Binding
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from autokernel.engine import events as ev
from autokernel.engine.errors import UserError
from autokernel.engine.session_state import SessionState

from ..widgets.dashboard import Dashboard, cycle_view, view_key_allowed
from ..widgets.footer import KeyFooter
from ..widgets.status import StatusLine
from .dialogs import ConfirmQuit, HelpScreen

TICK_S = 1 / 15


class EventInbox:
    """Thread-safe hand-over of events from the engine thread to the UI (append and pop only)."""

    def __init__(self) -> None:
        self._q: deque[ev.Event] = deque()
        self.received = 0

    def push(self, event: ev.Event) -> None:
        self._q.append(event)
        self.received += 1

    __call__ = push

    def drain(self) -> list[ev.Event]:
        out = []
        while True:
            try:
                out.append(self._q.popleft())
            except IndexError:
                return out


class LiveScreen(Screen):
    BINDINGS = [
        Binding("a", "approve", "Approve"),
        Binding("r", "reject", "Reject"),
        Binding("m", "toggle_approval", "Auto/ask"),
        Binding("p", "pause", "Pause/resume"),
        Binding("s", "skip", "Skip target"),
        Binding("v", "cycle_view", "View: code/chart/events"),
        Binding("d", "toggle_code", "Diff/source"),
        Binding("q", "quit_session", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]
    HELP = "Live session: the engine runs in the background; these keys steer it."
    # The footer's labels on a small terminal, so that every one of these keys fits in 80 columns.
    FOOTER_SHORT = {"toggle_approval": "Auto/ask", "pause": "Pause", "skip": "Skip", "cycle_view": "View",
                    "toggle_code": "Code"}

    def __init__(self, session: Any, inbox: EventInbox, clock: Callable[[], float] = time.time):
        super().__init__()
        self.session = session
        self.inbox = inbox
        self.clock = clock
        self.state = SessionState()
        self.error: str | None = None
        self.run_result: dict | None = None
        self.redraws = 0
        self._quitting = False
        self._engine_done = threading.Event()

    def compose(self):
        yield StatusLine(id="status")
        yield Dashboard(id="dashboard")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.set_interval(TICK_S, self.drain)
        self.run_worker(self._run_engine, thread=True, name="engine", exit_on_error=False)
        self.drain()

    # -- the engine thread ----------------------------------------------------------------------
    def _run_engine(self) -> dict | None:
        try:
            return self.session.run()
        finally:
            self._engine_done.set()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name != "engine":
            return
        if event.state == WorkerState.ERROR:
            err = event.worker.error
            self.error = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
            self.notify(self.error, title="engine stopped", severity="error", timeout=30)
        elif event.state == WorkerState.SUCCESS:
            self.run_result = event.worker.result
        if event.state in (WorkerState.ERROR, WorkerState.SUCCESS, WorkerState.CANCELLED):
            self.drain()
            if self._quitting:
                self.app.exit(self.error)

    @property
    def engine_running(self) -> bool:
        return not self._engine_done.is_set()

    # -- drawing --------------------------------------------------------------------------------
    def drain(self) -> None:
        """Fold what arrived since the last tick and redraw once (a burst costs one redraw)."""
        batch = self.inbox.drain()
        for e in batch:
            self.fold(e)
        if batch or not self.redraws:
            self.query_one(Dashboard).show(self.state)
            self.redraws += 1
        self._show_status()

    def fold(self, event: ev.Event) -> None:
        """One event into the state the panels show."""
        self.state.apply(event)

    def _show_status(self) -> None:
        s = self.state
        elapsed = None
        if s.started_ts is not None and not s.finished:
            elapsed = max(0.0, self.clock() - s.started_ts)
        extra = "[b $warning]stopping…[/]" if self._quitting and self.engine_running else ""
        self.query_one(StatusLine).show(s, elapsed, extra)

    # -- keys -----------------------------------------------------------------------------------
    def _pending_id(self) -> str | None:
        p = self.state.pending
        if p is None:
            pending = getattr(self.session, "pending_approval", None)
            return pending["candidate_id"] if pending else None
        return p.candidate_id

    def action_approve(self) -> None:
        cid = self._pending_id()
        if cid and self.session.approve(cid):
            self.notify(f"approved {cid}")
        else:
            self.notify("no candidate is waiting for approval", severity="warning")

    def action_reject(self) -> None:
        cid = self._pending_id()
        if cid and self.session.reject(cid):
            self.notify(f"rejected {cid}")
        else:
            self.notify("no candidate is waiting for approval", severity="warning")

    def action_toggle_approval(self) -> None:
        mode = "ask" if self.state.approval == "auto" else "auto"
        self.session.set_approval(mode)
        self.state.approval = mode  # shown at once; the ControlChanged event confirms it
        self._show_status()
        self.notify(f"approval: {mode}" + (" (new bests wait for a / r)" if mode == "ask" else ""))

    def action_pause(self) -> None:
        paused = getattr(self.session, "paused", self.state.status == "paused")
        if paused:
            self.session.resume()
            self.notify("resumed")
        else:
            self.session.pause()
            self.notify("pausing after the current step")

    def action_skip(self) -> None:
        self.session.skip_target()
        self.notify("skipping to the next target after the current step")

    def action_toggle_code(self) -> None:
        self.query_one(Dashboard).toggle_code(self.state)

    def action_cycle_view(self) -> None:
        cycle_view(self)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return view_key_allowed(self, action)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self, self.HELP))

    def action_quit_session(self) -> None:
        if not self.engine_running:
            self.app.exit(self.error)
            return
        if self._quitting:  # asked twice: leave now; the engine finishes its step and records `stopped`
            self.app.exit(self.error)
            return
        self.app.push_screen(
            ConfirmQuit("Stop the session and quit? The engine stops after its current step; everything "
                        "so far is saved and the session can be resumed (autokernel-tui --resume SESSION)."),
            self._confirmed_quit)

    def _confirmed_quit(self, yes: bool | None) -> None:
        if not yes:
            return
        self._quitting = True
        self.stop_engine()
        self._show_status()
        if not self.engine_running:
            self.app.exit(self.error)

    def on_unmount(self) -> None:
        self.stop_engine()

    def stop_engine(self) -> None:
        if self.engine_running:
            self.session.stop()
