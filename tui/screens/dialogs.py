"""Modal dialogs: confirm quitting, jump to an experiment, and the key help."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Label, Static


class ConfirmQuit(ModalScreen[bool]):
    """Quit? The engine stops after the step it is in; the session stays resumable."""

    BINDINGS = [Binding("y", "answer(True)", "Quit"), Binding("n,escape", "answer(False)", "Stay")]

    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.message)
            with Horizontal():
                yield Button("Stay (n)", id="stay")
                yield Button("Quit (y)", id="quit", variant="warning")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "quit")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class JumpDialog(ModalScreen[int | None]):
    """Asks for an experiment number to jump to."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, last: int):
        super().__init__()
        self.last = last

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Jump to experiment (1–{self.last}), Enter to go, Esc to cancel")
            yield Input(placeholder="experiment number", type="integer", id="jump-to")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(int(event.value))
        except ValueError:
            self.notify("type a whole number", severity="error")

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every key of the screen below, with what it does."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]

    def __init__(self, under: Screen, intro: str):
        super().__init__()
        self.under = under
        self.intro = intro

    def compose(self) -> ComposeResult:
        lines = [f"[b]{escape(self.intro)}[/]", ""]
        for key, binding in _bindings(self.under):
            lines.append(f"  [b $accent]{escape(key):<12}[/] {escape(binding.description or binding.action)}")
        lines += ["", "  [b $accent]ctrl+c      [/] quit, as q (a live session stops after its step, resumable)",
                  "  [b $accent]ctrl+p      [/] command palette (the same actions, by name)",
                  "  [b $accent]tab         [/] move between panels (the code and log scroll)",
                  "", "[dim]Esc or ? closes this help.[/]"]
        with VerticalScroll():
            yield Static("\n".join(lines))

    def action_close(self) -> None:
        self.dismiss(None)


def _bindings(screen: Screen):
    seen = set()
    for b in getattr(screen, "BINDINGS", []):
        if isinstance(b, Binding) and b.description and b.action not in seen:
            seen.add(b.action)
            yield b.key_display or b.key.split(",")[0], b
