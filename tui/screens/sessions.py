"""The sessions screen: every stored session, newest first, to replay (Enter) or resume (r)."""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from autokernel.engine.session_state import format_duration
from autokernel.engine.store import Store

from .dialogs import HelpScreen

RESUMABLE = ("stopped", "interrupted", "failed")


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts)) if ts else "—"


class SessionsScreen(Screen):
    BINDINGS = [
        Binding("enter", "replay", "Replay", priority=True),
        Binding("r", "resume", "Resume"),
        Binding("f5", "reload", "Reload"),
        Binding("q", "quit_app", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]
    HELP = "Past sessions: replay any of them, resume a stopped or interrupted optimize session or KernelBench batch."

    def __init__(self, store: Store):
        super().__init__()
        self.store = store
        self.rows: list[dict] = []

    def compose(self):
        yield Static(f"sessions in {self.store.path} (times in UTC) — Enter: replay · r: resume · q: quit",
                     id="sessions-help")
        table = DataTable(cursor_type="row", zebra_stripes=True, id="sessions")
        yield table
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        t.add_columns("id", "kind", "model", "device", "status", "events", "started", "ran")
        self.action_reload()
        t.focus()

    def action_reload(self) -> None:
        t = self.query_one(DataTable)
        t.clear()
        self.rows = self.store.sessions()
        for r in self.rows:
            status = r["status"]
            colour = {"completed": "green", "running": "cyan", "failed": "red"}.get(status, "yellow")  # ANSI: reads on dark and light
            t.add_row(r["id"], r["kind"], Path(r["model"] or "").name or "—", r["device"] or "—",
                      Text(status, style=colour), str(r["n_events"]), _when(r["created"]),
                      format_duration((r["updated"] or 0) - (r["created"] or 0)), key=r["id"])
        if not self.rows:
            self.query_one("#sessions-help", Static).update(
                f"no sessions yet in {self.store.path}: run autokernel-tui MODEL.py to start one")

    def _selected(self) -> dict | None:
        t = self.query_one(DataTable)
        if not self.rows or t.cursor_row is None or t.cursor_row >= len(self.rows):
            return None
        return self.rows[t.cursor_row]

    def action_replay(self) -> None:
        row = self._selected()
        if row is not None:
            self.app.open_replay(row["id"])

    def action_resume(self) -> None:
        row = self._selected()
        if row is None:
            return
        if row["kind"] not in ("optimize", "kernelbench") or row["status"] not in RESUMABLE:
            self.notify(f"{row['id']} is {row['status']} ({row['kind']}): only a stopped or interrupted "
                        "optimize session or KernelBench batch can be resumed", severity="warning")
            return
        if row["kind"] == "kernelbench":
            self.app.open_batch_resume(row["id"])
        else:
            self.app.open_resume(row["id"])

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self, self.HELP))

    def action_quit_app(self) -> None:
        self.app.exit()
