"""The candidate's code: its diff against the parent, or (toggled with `d`) its full source."""

from __future__ import annotations

from rich.syntax import Syntax
from textual.containers import VerticalScroll
from textual.widgets import Static

from autokernel.engine.session_state import SessionState

from .titled import Titled


class CodePanel(Titled, VerticalScroll):
    DEFAULT_CSS = "CodePanel > Static { width: auto; }"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.full_source = False
        self._shown: tuple | None = None
        self._body = Static("", expand=False)

    def compose(self):
        yield self._body

    def toggle(self, state: SessionState) -> None:
        self.full_source = not self.full_source
        self.show(state)

    def show(self, state: SessionState) -> None:
        c = state.candidate
        dark = self.app.current_theme.dark if self.app.current_theme else True
        key = (c.candidate_id if c else None, self.full_source, dark)
        if key == self._shown:
            return
        self._shown = key
        mode = "source" if self.full_source else "diff"
        if c is None:
            self.set_title("code")
            self._body.update("[dim]no candidate yet[/]")
            return
        theme = "ansi_dark" if dark else "ansi_light"
        if self.full_source or not c.diff:
            what = "source" if self.full_source else "source (the starter: no parent to diff against)"
            self.set_title(f"{c.candidate_id} {what} · d: {'diff' if self.full_source else 'source'}")
            self._body.update(Syntax(c.source, "python", theme=theme, line_numbers=True, word_wrap=False))
        else:
            self.set_title(f"{c.candidate_id} diff vs {c.parent_id} · d: source")
            self._body.update(Syntax(c.diff, "diff", theme=theme, word_wrap=False))
        self.scroll_home(animate=False)
        self.mode = mode
