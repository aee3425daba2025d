"""All the panels of a session together: the live and the replay screen both show one of these.

Two layouts. Large (COMPACT_WIDTH x COMPACT_HEIGHT and up): every panel at once, side by side. Small (an
80x24 SSH terminal): what matters most stacked without scrolling, the table trimmed to the rows round
the target, the harness and the hypothesis in a few lines each, and below them one of the code, the
chart or the event log, switched with `v` (the screens bind it; the footer shows it at that size).
"""

from __future__ import annotations

from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen

from autokernel.engine.session_state import SessionState

from .bottlenecks import BottleneckTable
from .chart import SpeedupChart
from .code import CodePanel
from .eventlog import EventLog
from .hypothesis import HypothesisPanel
from .stages import StagesPanel
from .workers import WorkersLine

COMPACT_WIDTH = 110  # below this many columns (or COMPACT_HEIGHT rows) the small layout
COMPACT_HEIGHT = 32
VIEWS = {"code": "#code", "chart": "#chart", "log": "#log"}  # the small layout's lower panel, in `v` order


class Dashboard(VerticalScroll):
    """Side by side on a large terminal; on a small one stacked, the lower panel one of three (`v`)."""

    can_focus = False

    def __init__(self, **kw):
        super().__init__(**kw)
        self.compact = False
        self.view = "code"
        self._state: SessionState | None = None

    def compose(self):
        yield WorkersLine(id="workers")  # a pool's workers; hidden with one
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
                code.set_title("code")
                yield code
            chart = SpeedupChart(id="chart")
            chart.set_title("speedup vs eager")
            yield chart
        log = EventLog(id="log")
        log.set_title("events")
        yield log

    def on_mount(self) -> None:
        self._show_view()

    def on_resize(self) -> None:
        compact = self.size.width < COMPACT_WIDTH or self.screen.size.height < COMPACT_HEIGHT
        if compact != self.compact:
            self.compact = compact
            self.set_class(compact, "-compact")
            self.query_one(StagesPanel).compact = self.query_one(HypothesisPanel).compact = compact
            self._show_view()
            self.screen.refresh_bindings()  # `v` is offered only in the small layout
        if self._state is not None:
            self.show(self._state)

    def show(self, state: SessionState) -> None:
        self._state = state
        self.query_one(BottleneckTable).show(state)
        self.query_one(HypothesisPanel).show(state)
        self.query_one(StagesPanel).show(state)
        self.query_one(CodePanel).show(state)
        self.query_one(SpeedupChart).show(state)
        self.query_one(EventLog).show(state)
        self.query_one(WorkersLine).show(state)

    def toggle_code(self, state: SessionState) -> None:
        self.query_one(CodePanel).toggle(state)

    def cycle_view(self) -> str:
        """The small layout's lower panel moves on to the next of code, chart and events."""
        names = list(VIEWS)
        self.view = names[(names.index(self.view) + 1) % len(names)]
        self._show_view()
        return self.view

    def _show_view(self) -> None:
        names = list(VIEWS)
        following = names[(names.index(self.view) + 1) % len(names)]
        for name, selector in VIEWS.items():
            self.set_class(name == self.view, f"-view-{name}")
            shown = self.compact and name == self.view
            self.query_one(selector).set_hint(f"v: {'events' if following == 'log' else following}" if shown else "")


def cycle_view(screen: Screen) -> None:
    """`v` on the live and replay screens: the small layout's lower panel moves on (code, chart, events)."""
    screen.query_one(Dashboard).cycle_view()


def view_key_allowed(screen: Screen, action: str) -> bool:
    """`v` only in the small layout (the large one shows every panel at once); other keys always."""
    if action != "cycle_view":
        return True
    dashboards = screen.query(Dashboard)
    return bool(dashboards) and dashboards.first().compact
