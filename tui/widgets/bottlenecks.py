"""The Amdahl-ranked bottleneck table, the current target marked and its best speedup updating."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from autokernel.engine.session_state import RowView, SessionState

# (key, label, width) of the columns every width shows; the kind column is as wide as the longest kind,
# the op column takes what is left (and goes first when little is), status goes next.
NUMBERS = (("share", "share", 6), ("now", "now ms", 6), ("floor", "floor", 6), ("best", "best", 6),
           ("e2e", "e2e now", 7), ("bound", "bound", 6))
STATUS = ("status", "status", 9)
OP_MIN = 10
PAD = 2  # a DataTable cell's padding, left and right


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.3g}"


def fit_columns(width: int, kinds: list[str], names: list[str]) -> tuple[tuple[str, str, int], ...]:
    """The columns for a table `width` cells wide: whole kind names always, the op's name when it fits."""
    fixed = [("mark", "", 1), ("kind", "kind", max([4, *map(len, kinds)]))]
    used = sum(w + PAD for _, _, w in fixed + list(NUMBERS))
    status = [STATUS] if used + STATUS[2] + PAD <= width else []
    used += sum(w + PAD for _, _, w in status)
    op_width = min(width - used - PAD, max([OP_MIN, *map(len, names)]))
    op = [("op", "op", op_width)] if op_width >= OP_MIN else []
    return tuple(fixed + op + list(NUMBERS) + status)


def _cells(r: RowView, is_current: bool) -> dict[str, str]:
    best = "—" if r.best_speedup is None else f"{r.best_speedup:.2f}×" + ("" if r.meaningful else "*")
    measured_on_cpu = r.e2e_measured is not None and not r.e2e_meaningful
    return {"mark": ">" if is_current else "", "kind": r.kind, "op": r.name, "share": f"{100 * r.share:.1f}%",
            "now": _ms(r.now_ms), "floor": _ms(r.floor_ms), "best": best,
            "e2e": f"{r.e2e_now:.3f}×" + ("*" if measured_on_cpu else ""), "bound": f"{r.max_speedup:.3f}×",
            "status": "searching" if is_current else r.status}


class BottleneckTable(DataTable):
    """One row per profiled op, in the engine's Amdahl order (largest end-to-end bound first).

    `best` is the kept kernel's speedup over eager (* when timed on CPU, where it means nothing),
    `e2e now` what it gives the whole model (measured once the kernels are swapped in, else estimated),
    `bound` what the op would give at its floor. Column widths follow the table's width and the kinds in
    it, never the rows' arrival, so the table does not jump as they come.
    """

    def __init__(self, **kw):
        super().__init__(cursor_type="row", zebra_stripes=True, show_cursor=False, **kw)
        self._shown: tuple | None = None
        self._width = 0
        self.columns_shown: tuple[tuple[str, str, int], ...] = ()
        self._state: SessionState | None = None

    def on_resize(self) -> None:
        """The columns follow the width the layout gave the table."""
        self._width = self.content_size.width
        if self._state is not None:
            self.show(self._state)

    def _layout(self, state: SessionState) -> None:
        columns = fit_columns(self._width, [r.kind for r in state.rows], [r.name for r in state.rows])
        if columns == self.columns_shown:
            return
        self.clear(columns=True)
        for key, label, width in columns:
            self.add_column(label, width=width, key=key)
        self.columns_shown = columns
        self._shown = None

    def show(self, state: SessionState) -> None:
        self._state = state
        self._layout(state)
        widths = {key: width for key, _, width in self.columns_shown}
        rows = []
        for r in state.rows:
            target = state.targets.get(state.current_target or "")  # a subgraph target's row is of kind other
            is_current = target is not None and target.row == r.index and target.done is None
            cells = _cells(r, is_current)
            if "op" in widths and len(cells["op"]) > widths["op"]:
                cells["op"] = cells["op"][: widths["op"] - 1] + "…"
            rows.append((is_current, tuple(cells[key] for key in widths)))
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
