"""The workers line: with a pool of workers, each one's device label, what it runs, experiments done and per hour.

Hidden while a session has one worker (nothing changes for a one-GPU user); a line, cut to the width,
so it fits the 80x24 layout. Folded from the events (`engine/worker_board.py`), so replay shows it too.
"""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from autokernel.engine.session_state import SessionState


class WorkersLine(Static):
    DEFAULT_CSS = "WorkersLine { display: none; height: 1; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }"

    def show(self, state: SessionState) -> None:
        board = state.workers
        self.display = len(board) > 1
        if self.display:
            now = state.last_ts or 0.0
            self.update("[b]workers[/] " + escape(board.line(now, max(20, self.size.width - 10))))
