"""The one-line status: device, experiments and rate, elapsed, budget left, LLM cost, mode."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from autokernel.engine.session_state import SessionState, format_duration, model_vs_compile

STATUS_COLOURS = {"running": "$success", "paused": "$warning", "stopping": "$warning", "completed": "$success",
                  "stopped": "$warning", "failed": "$error", "waiting": "$secondary"}


class StatusLine(Static):
    DEFAULT_CSS = "StatusLine { height: 1; background: $boost; padding: 0 1; }"

    def show(self, state: SessionState, elapsed_s: float | None = None, extra: str = "") -> None:
        """What needs the person comes first (waiting, the approval mode), then, once integrated, the model
        against torch.compile, so a narrow terminal cuts the device name, not them; below 110 columns the
        rate and the word "elapsed" go. `*`: measured on the CPU, not meaningful."""
        el = state.elapsed_s if elapsed_s is None else elapsed_s
        wide = self.app.size.width >= 110
        colour = STATUS_COLOURS.get(state.status, "$foreground")
        parts = [f"[b {colour}]{escape(state.status)}[/]"]
        if extra:
            parts.append(extra)
        if state.pending is not None:
            parts.append("[b reverse $warning] waiting for you [/]")
        parts.append(f"approval [b]{escape(state.approval)}[/]")
        vs_compile = model_vs_compile(state.integration)
        if vs_compile is not None:  # the headline: the model against what `torch.compile(model)` gives
            colour = "$success" if vs_compile >= 1.0 else "$warning"
            cpu = "" if state.integration.meaningful else "*"
            parts.append(f"model [b {colour}]{vs_compile:.2f}×{cpu}[/] compile")
        parts.append(f"{state.experiments} exp ({state.rate_per_hour(el):.0f}/h)" if wide else f"{state.experiments} exp")
        parts.append(f"{format_duration(el)} elapsed" if wide else format_duration(el))
        budget = state.budget_left(el)
        if budget:
            parts.append(escape(budget))
        parts.append(f"${state.cost_usd:.2f}")
        parts.append(escape(state.device_name or state.device or "no device yet"))
        self.update(" │ ".join(parts))
