"""The agent's current idea in words: who proposed it, from which playbook tier, and why.

On a small terminal (`compact`) the target moves into the border and the idea and its hypothesis run
together in the lines there are, ending in … when they do not fit (the event log keeps every idea).
"""

from __future__ import annotations

import textwrap

from textual.markup import escape
from textual.widgets import Static

from autokernel.engine.session_state import SessionState

from .stages import candidate_line

COMPACT_LINES = 3


def _target(state: SessionState) -> str:
    t = state.target
    return f"{t.name} [{'×'.join(str(v) for v in t.shape.values())}] {t.dtype} {t.backend}" if t else ""


class HypothesisPanel(Static):
    compact = False
    _state: SessionState | None = None

    def on_resize(self) -> None:
        if self.compact and self._state is not None:  # the compact text is wrapped to the panel's width
            self.show(self._state)

    def show(self, state: SessionState) -> None:
        self._state = state
        if self.compact:
            self.border_title = " · ".join(p for p in ("hypothesis", escape(_target(state))) if p)
            self.update(self._compact_text(state))
            return
        self.border_title = "hypothesis"
        t, idea, c = state.target, state.idea, state.candidate
        lines = []
        if t is None:
            lines.append("[dim]no target yet: profiling the model…[/]" if state.status == "running"
                         else "[dim]no target[/]")
        else:
            name, _, rest = _target(state).partition(" ")
            lines.append(f"[b]target[/] [$accent]{escape(name)}[/] {escape(rest)}")
        if idea is not None:
            lines.append(f"[b]agent[/] {escape(idea.agent)}  [b]tier {idea.tier}[/] {escape(idea.tier_name)}  "
                         f"[dim]round {idea.round}[/]")
            lines.append(f"[b]idea[/] {escape(idea.title)}")
            lines.append(escape(idea.hypothesis))
        elif c is not None and not c.parent_id:
            lines.append("[b]baseline[/]: the starter kernel, checked and timed before any idea")
        if c is not None:
            lines.append(candidate_line(c))
        self.update("\n".join(lines))

    def _compact_text(self, state: SessionState) -> str:
        idea, c = state.idea, state.candidate
        if idea is None:
            if c is not None and not c.parent_id:
                return "[b]baseline[/]: the starter kernel, checked and timed before any idea"
            return "[dim]no idea yet[/]"
        head = f"tier {idea.tier} ({idea.tier_name}), {idea.agent}: "
        text = f"{head}{idea.title}. {idea.hypothesis}"
        width = self.content_size.width
        if width > 10:
            lines = textwrap.wrap(text, width)
            if len(lines) > COMPACT_LINES:
                lines = lines[:COMPACT_LINES]
                lines[-1] = lines[-1][: width - 1].rstrip() + "…"
            text = "\n".join(lines)
        return f"[b]{escape(head)}[/]{escape(text[len(head):])}" if text.startswith(head) else escape(text)
