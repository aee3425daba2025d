"""The event log: one line per event worth reading, coloured by level."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import RichLog

from autokernel.engine.session_state import LogLine, SessionState

STYLES = {"error": "bold red", "warning": "yellow", "success": "green", "info": ""}


def _line(line: LogLine) -> Text:
    stamp = time.strftime("%H:%M:%S", time.gmtime(line.ts))
    return Text.assemble((stamp + " ", "dim"), (line.text, STYLES.get(line.level, "")))


class EventLog(RichLog):
    """Shows the newest lines of the state's log; appends only what is new when it can."""

    SHOWN = 200

    def __init__(self, **kw):
        super().__init__(wrap=False, markup=False, highlight=False, max_lines=2000, **kw)
        self._last: LogLine | None = None

    def show(self, state: SessionState) -> None:
        lines = list(state.log)
        if not lines:
            if self._last is not None:
                self.clear()
                self._last = None
            return
        if lines[-1] is self._last:
            return
        try:  # the lines since the last one shown, if it is still in the log
            start = len(lines) - 1 - lines[::-1].index(self._last) + 1 if self._last is not None else None
        except ValueError:
            start = None
        if start is None:
            self.clear()
            start = max(0, len(lines) - self.SHOWN)
        for line in lines[start:]:
            self.write(_line(line))
        self._last = lines[-1]
