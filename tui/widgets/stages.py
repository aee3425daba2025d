"""The five harness stages of the current candidate, its timing and what became of it."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from autokernel.engine.results import STAGES
from autokernel.engine.session_state import SessionState

ICONS = {
    "pending": "[dim]○ pending[/]",
    "running": "[$warning]◐ running[/]",
    "pass": "[$success]✔ pass[/]",
    "fail": "[b $error]✘ fail[/]",
    "crash": "[b $error]✘ crash[/]",
    "timeout": "[b $error]✘ timeout[/]",
    "skipped": "[dim]– skipped[/]",
}
DECISIONS = {"kept": "$success", "discarded": "$foreground", "rejected": "$warning", "failed": "$error"}


class StagesPanel(Static):
    def show(self, state: SessionState) -> None:
        c = state.candidate
        if c is None:
            self.update("[dim]no candidate checked yet[/]")
            return
        lines = []
        for s in STAGES:
            status, detail, seconds = c.stage(s)
            icon = ICONS.get(status, escape(status))
            extra = ""
            if status in ("fail", "crash", "timeout") and detail:
                extra = f" [$error]{escape(detail)}[/]"
            elif status == "pass" and seconds:
                extra = f" [dim]{seconds:.2f}s[/]"
            lines.append(f"{s:<12} {icon}{extra}")
        b = c.bench
        if b:
            comp = f" · {b['speedup_compile']:.2f}× compile" if b.get("speedup_compile") else ""
            note = "" if b.get("meaningful", True) else " [dim](CPU: not meaningful)[/]"
            lines.append(f"[b]timed[/] {b['kernel_ms']:.4g} ms · [b]{b['speedup_eager']:.2f}×[/] eager{note}")
            lines.append(f"      {100 * b.get('fraction_of_ceiling', 0):.0f}% of speed of light{comp}")
        if state.pending is not None and state.pending.candidate_id == c.candidate_id:
            lines.append(f"[b reverse $warning] {state.pending.speedup:.2f}× the best: a approve · r reject [/]")
        elif c.decision:
            color = DECISIONS.get(c.decision, "$foreground")
            by = " by you" if c.decision_by == "user" else ""
            lines.append(f"[b {color}]{c.decision}{by}[/] [dim]{escape(c.reason)}[/]")
        self.update("\n".join(lines))
