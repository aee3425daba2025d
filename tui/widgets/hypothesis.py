"""The agent's current idea in words: who proposed it, from which playbook tier, and why."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from autokernel.engine.session_state import SessionState


class HypothesisPanel(Static):
    def show(self, state: SessionState) -> None:
        t, idea, c = state.target, state.idea, state.candidate
        lines = []
        if t is None:
            lines.append("[dim]no target yet: profiling the model…[/]" if state.status == "running"
                         else "[dim]no target[/]")
        else:
            shape = "×".join(str(v) for v in t.shape.values())
            lines.append(f"[b]target[/] [$accent]{escape(t.name)}[/] [{escape(shape)}] {escape(t.dtype)} {escape(t.backend)}")
        if idea is not None:
            lines.append(f"[b]agent[/] {escape(idea.agent)}  [b]tier {idea.tier}[/] {escape(idea.tier_name)}  "
                         f"[dim]round {idea.round}[/]")
            lines.append(f"[b]idea[/] {escape(idea.title)}")
            lines.append(escape(idea.hypothesis))
        elif c is not None and not c.parent_id:
            lines.append("[b]baseline[/]: the starter kernel, checked and timed before any idea")
        if c is not None:
            parent = f" from {escape(c.parent_id)}" if c.parent_id else ""
            lines.append(f"[b]#{c.experiment}[/] {escape(c.candidate_id)}: {escape(c.label)}{parent}")
        self.update("\n".join(lines))
