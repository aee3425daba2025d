"""The event log: the newest lines of the state's log, coloured by level, scrollable when focused.

It draws only the lines that fit, from the state's bounded log, so a replay step or a burst of
live events costs the same whatever the session's length.
"""

from __future__ import annotations

import time

from textual.binding import Binding
from textual.content import Content
from textual.widget import Widget

from autokernel.engine.session_state import LogLine, SessionState

from .titled import Titled

STYLES = {"error": "bold $error", "warning": "$warning", "success": "$success", "info": ""}


def _line(line: LogLine) -> Content:
    stamp = time.strftime("%H:%M:%S", time.gmtime(line.ts))  # UTC, as the sessions list
    return Content.assemble((stamp + " ", "dim"), (line.text, STYLES.get(line.level, "")))


class EventLog(Titled, Widget, can_focus=True):
    BINDINGS = [
        Binding("up", "scroll_lines(1)", "Older", show=False),
        Binding("down", "scroll_lines(-1)", "Newer", show=False),
        Binding("pageup", "scroll_lines(5)", "Older", show=False),
        Binding("pagedown", "scroll_lines(-5)", "Newer", show=False),
        Binding("end", "scroll_lines(-1000000)", "Newest", show=False),
    ]
    DEFAULT_CSS = "EventLog { text-wrap: nowrap; text-overflow: ellipsis; }"

    def __init__(self, **kw):
        super().__init__(**kw)
        self._lines: list[LogLine] = []
        self._last: LogLine | None = None
        self.back = 0  # how many lines up from the newest the view is scrolled

    def show(self, state: SessionState) -> None:
        last = state.log[-1] if state.log else None
        if last is self._last and len(state.log) == len(self._lines):
            return
        self._last = last
        self._lines = list(state.log)
        self.refresh()

    def action_scroll_lines(self, n: int) -> None:
        self.back = max(0, min(self.back + n, max(0, len(self._lines) - 1)))
        self.refresh()

    def render(self) -> Content:
        h = max(1, self.content_size.height)
        end = len(self._lines) - self.back
        shown = self._lines[max(0, end - h): end]
        self.border_subtitle = f"{self.back} newer below · End: newest" if self.back else ""
        return Content("\n").join(_line(line) for line in shown)
