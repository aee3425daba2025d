"""The key footer: Textual's, with short labels when the full ones would not fit, so every key shows.

At 80 columns (and for the replay's many keys at 120) the full labels ran off the edge, and `q Quit`
and `? Help` were the ones cut. When the full labels need more than the footer's width, the keys take
the screen's `FOOTER_SHORT` labels, leave out its `FOOTER_NARROW_DROP` actions (still in the help and
the palette) and the palette's own key, in Textual's compact style.
"""

from __future__ import annotations

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

PALETTE = 12  # the palette's key, docked right: "^p palette" and its separator


class KeyFooter(Footer):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.narrow = False

    def full_width(self) -> int:
        """Columns the full labels take (key, label and padding per action, as Textual draws them)."""
        seen, total = set(), PALETTE if self.app.ENABLE_COMMAND_PALETTE else 0
        for _, binding, _, _ in self.screen.active_bindings.values():
            if binding.show and binding.action not in seen:
                seen.add(binding.action)
                total += len(self.app.get_key_display(binding)) + len(binding.description) + 3
        return total

    def compose(self):
        self.narrow = self.full_width() > self.size.width > 0
        self.compact = self.narrow
        self.show_command_palette = not self.narrow
        short = getattr(self.screen, "FOOTER_SHORT", {}) if self.narrow else {}
        drop = getattr(self.screen, "FOOTER_NARROW_DROP", ()) if self.narrow else ()
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                if widget.action in drop:
                    continue
                widget.description = short.get(widget.action, widget.description)
            yield widget

    def on_resize(self) -> None:
        if (self.full_width() > self.size.width) != self.narrow:
            self.call_after_refresh(self.recompose)
