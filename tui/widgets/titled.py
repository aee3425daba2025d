"""A panel's border title with a key hint after it, so the small layout can say which key comes next
(its panels keep only the top border, so a subtitle would not show)."""

from __future__ import annotations


class Titled:
    """Mixin for widgets: `set_title` for the panel's own text, `set_hint` for the dashboard's hint."""

    _title = ""
    _hint = ""

    def set_title(self, text: str) -> None:
        self._title = text
        self._draw_title()

    def set_hint(self, hint: str) -> None:
        self._hint = hint
        self._draw_title()

    def _draw_title(self) -> None:
        self.border_title = " · ".join(part for part in (self._title, self._hint) if part)
