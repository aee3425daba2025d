"""The five harness stages of the current candidate, its timing and what became of it.

On a small terminal (`compact`) the same in four lines: the candidate, the stages on one line, the
failure or the timing, and the decision (or the approval prompt)."""

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
MARKS = {"pending": "[dim]○[/]", "running": "[$warning]◐[/]", "pass": "[$success]✔[/]", "fail": "[b $error]✘[/]",
         "crash": "[b $error]✘[/]", "timeout": "[b $error]✘[/]", "skipped": "[dim]–[/]"}  # compact: marks only
DECISIONS = {"kept": "$success", "discarded": "$foreground", "rejected": "$warning", "failed": "$error"}
FAILED = ("fail", "crash", "timeout")


def candidate_line(c) -> str:
    """'#3 rmsnorm-0003: BLOCK=512, num_warps=4 from rmsnorm-0001'"""
    parent = f" from {escape(c.parent_id)}" if c.parent_id else ""
    return f"[b]#{c.experiment}[/] {escape(c.candidate_id)}: {escape(c.label)}{parent}"


class StagesPanel(Static):
    compact = False

    def show(self, state: SessionState) -> None:
        c = state.candidate
        if c is None:
            self.update("[dim]no candidate checked yet[/]")
            return
        if self.compact:
            self.update("\n".join(self._compact_lines(state)))
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
            note = "" if b.get("meaningful", True) else " [dim](CPU: not meaningful)[/]"
            lines.append(f"[b]timed[/] {b['kernel_ms']:.4g} ms · [b]{b['speedup_eager']:.2f}×[/] eager{note}")
            if b.get("timing"):  # the wall clock decided, for the baselines too: say so, with both numbers
                lines.append(f"      [dim]{escape(b['timing'])}[/]")
            if b.get("meaningful", True):  # a CPU has no ceiling worth a fraction
                lines.append(f"      {100 * b.get('fraction_of_ceiling', 0):.0f}% of speed of light{_compile(b)}")
        outcome = _outcome(state, c)
        self.update("\n".join(lines + [outcome] if outcome else lines))

    @staticmethod
    def _compact_lines(state: SessionState) -> list[str]:
        c = state.candidate
        stages = "  ".join(f"{s} {MARKS.get(c.stage(s)[0], escape(c.stage(s)[0]))}" for s in STAGES)
        failed = next((s for s in STAGES if c.stage(s)[0] in FAILED), None)
        b = c.bench
        if failed:
            status, detail, _ = c.stage(failed)
            detail_line = f"[$error]{failed} {escape(status)}: {escape(detail)}[/]"
        elif b:
            sol = (f" · {100 * b.get('fraction_of_ceiling', 0):.0f}% SoL{_compile(b)}" if b.get("meaningful", True)
                   else " [dim](CPU)[/]")
            wall = " · wall clock" if b.get("timing") else ""  # the full line is in the full view and the log
            detail_line = f"[b]timed[/] {b['kernel_ms']:.4g} ms · [b]{b['speedup_eager']:.2f}×[/] eager{wall}{sol}"
        else:
            detail_line = "[dim]checking…[/]" if not c.decision else ""
        return [candidate_line(c), stages, detail_line, _outcome(state, c)]


def _compile(bench: dict) -> str:
    return f" · {bench['speedup_compile']:.2f}× compile" if bench.get("speedup_compile") else ""


def _outcome(state: SessionState, c) -> str:
    """The approval prompt while the candidate waits, else its decision (empty while undecided)."""
    if state.pending is not None and state.pending.candidate_id == c.candidate_id:
        return f"[b reverse $warning] {state.pending.speedup:.2f}× the best: a approve · r reject [/]"
    if c.decision:
        color = DECISIONS.get(c.decision, "$foreground")
        by = " by you" if c.decision_by == "user" else ""
        return f"[b {color}]{c.decision}{by}[/] [dim]{escape(c.reason)}[/]"
    return ""
