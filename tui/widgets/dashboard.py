"""All the panels of a session together: the live and the replay screen both show one of these."""

from __future__ import annotations

from textual.containers import Horizontal, Vertical, VerticalScroll

from autokernel.engine.session_state import SessionState

from .bottlenecks import BottleneckTable
from .chart import SpeedupChart
from .code import CodePanel
from .eventlog import EventLog
from .hypothesis import HypothesisPanel
from .stages import StagesPanel

COMPACT_WIDTH = 110  # below this many columns (or COMPACT_HEIGHT rows) the panels stack and scroll
COMPACT_HEIGHT = 32


class Dashboard(VerticalScroll):
    """Side by side on a large terminal; stacked (scroll with Tab / PgDn) on a small one."""

    can_focus = False

    def compose(self):
        with Horizontal(id="top"):
            t = BottleneckTable(id="bottlenecks")
            t.border_title = "bottlenecks (Amdahl order)"
            yield t
            s = StagesPanel(id="stages")
            s.border_title = "harness"
            yield s
        with Horizontal(id="middle"):
            with Vertical(id="left"):
                h = HypothesisPanel(id="hypothesis")
                h.border_title = "hypothesis"
                yield h
                code = CodePanel(id="code")
                code.border_title = "code"
                yield code
            chart = SpeedupChart(id="chart")
            chart.border_title = "speedup vs eager"
            yield chart
        log = EventLog(id="log")
        log.border_title = "events"
        yield log

    def on_resize(self) -> None:
        compact = self.size.width < COMPACT_WIDTH or self.screen.size.height < COMPACT_HEIGHT
        self.set_class(compact, "-compact")
        table_width = self.size.width if compact else self.size.width * 3 // 5
        self.query_one(BottleneckTable).set_narrow(table_width < 100)

    def show(self, state: SessionState) -> None:
        self.query_one(BottleneckTable).show(state)
        self.query_one(HypothesisPanel).show(state)
        self.query_one(StagesPanel).show(state)
        self.query_one(CodePanel).show(state)
        self.query_one(SpeedupChart).show(state)
        self.query_one(EventLog).show(state)

    def toggle_code(self, state: SessionState) -> None:
        self.query_one(CodePanel).toggle(state)
