"""The live screen of a KernelBench batch: the problem table above the dashboard of the problem under way.

It is the live screen (same keys, same engine thread, same coalesced redraws) driving a
`KernelBenchBatch`, which forwards each control to the problem under way. Each problem's session
starts a fresh dashboard; the table follows the batch every tick. Enter on a finished problem
replays its session.
"""

from __future__ import annotations

from textual.widgets import DataTable

from autokernel.engine import events as ev
from autokernel.engine.session_state import SessionState

from ..widgets.dashboard import Dashboard
from ..widgets.footer import KeyFooter
from ..widgets.problems import ProblemTable
from ..widgets.status import StatusLine
from .live import LiveScreen


class KernelBenchScreen(LiveScreen):
    HELP = ("KernelBench batch: the problems run one after another; the keys steer the problem under way, "
            "q stops the batch (the current problem's session stays resumable). Enter on a finished problem "
            "replays its run.")

    def compose(self):
        yield StatusLine(id="status")
        table = ProblemTable(id="problems")
        table.border_title = "KernelBench problems"
        yield table
        yield Dashboard(id="dashboard")
        yield KeyFooter()

    def fold(self, event: ev.Event) -> None:
        if isinstance(event, ev.SessionStarted) and event.kind == "optimize":
            self.state = SessionState()  # the next problem: its own dashboard
        super().fold(event)

    def drain(self) -> None:
        super().drain()
        batch = self.session
        self.query_one(ProblemTable).show(batch.problems, list(batch.results), batch.index)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        i = event.cursor_row
        results = self.session.results
        if i < len(results) and results[i].session_id:
            self.app.open_replay(results[i].session_id)
        else:
            self.notify("that problem has no finished run to replay yet", severity="warning")
