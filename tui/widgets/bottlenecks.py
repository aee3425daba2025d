"""The Amdahl-ranked bottleneck table, the current target marked and its best speedup updating."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from autokernel.engine.session_state import SessionState

# (label, width): fixed widths, so the table looks the same however its rows arrived
WIDE = (("", 1), ("kind", 12), ("op", 20), ("share", 6), ("now ms", 7), ("floor", 6), ("best", 7),
        ("e2e now", 7), ("bound", 7), ("status", 10))
NARROW_DROP = (2, 9)  # op and status go first on a small terminal
NARROW = tuple(c for i, c in enumerate(WIDE) if i not in NARROW_DROP)


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.3g}"


class BottleneckTable(DataTable):
    """One row per profiled op, in the engine's Amdahl order (largest end-to-end bound first).

    `best` is the kept kernel's speedup over eager (* when timed on CPU, where it means nothing),
    `e2e now` what it gives the whole model, `bound` what the op would give at its floor.
    """

    def __init__(self, **kw):
        super().__init__(cursor_type="row", zebra_stripes=True, show_cursor=False, **kw)
        self._shown: tuple | None = None
        self.narrow = False

    def on_mount(self) -> None:
        self._add_columns(WIDE)

    def _add_columns(self, columns) -> None:
        for label, width in columns:
            self.add_column(label, width=width)

    def set_narrow(self, narrow: bool) -> None:
        if narrow == self.narrow:
            return
        self.narrow = narrow
        self.clear(columns=True)
        self._add_columns(NARROW if narrow else WIDE)
        self._shown = None
        if self._state is not None:
            self.show(self._state)

    _state: SessionState | None = None

    def show(self, state: SessionState) -> None:
        self._state = state
        rows = []
        for r in state.rows:
            target = state.targets.get(r.kind)
            is_current = target is not None and target.row == r.index and state.current_target == r.kind \
                and target.done is None
            best = "—" if r.best_speedup is None else f"{r.best_speedup:.2f}×" + ("" if r.meaningful else "*")
            cells = [
                ">" if is_current else "",
                r.kind,
                r.name,
                f"{100 * r.share:.1f}%",
                _ms(r.now_ms),
                _ms(r.floor_ms),
                best,
                f"{r.e2e_now:.3f}×",
                f"{r.max_speedup:.3f}×",
                "searching" if is_current else r.status,
            ]
            if self.narrow:
                cells = [c for i, c in enumerate(cells) if i not in NARROW_DROP]
            rows.append((is_current, tuple(cells)))
        key = tuple(rows)
        if key == self._shown:
            return
        self._shown = key
        self.clear()
        current_row = None
        for i, (current, cells) in enumerate(rows):
            self.add_row(*(Text(c, style="bold" if current else "") for c in cells), key=str(i))
            if current:
                current_row = i
        self.show_cursor = current_row is not None  # the row cursor marks the target being searched
        if current_row is not None:
            self.move_cursor(row=current_row, animate=False)
