"""Speedup over experiments for the current target, drawn in character cells with theme colours.

Each experiment is a point (kept ◆, passed •, failed × on the floor), the best-so-far frontier is a
line, eager (1.0×) and torch.compile are reference lines; below, the best's percent of the device's
speed of light. Thousands of experiments are binned into the columns there are, so drawing costs
the same at 50 or 5,000.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

from autokernel.engine.session_state import SessionState, TargetView

from .titled import Titled

AXIS = 7  # width of the y labels


def _sol_bar(fraction: float | None, width: int) -> str:
    if fraction is None:
        return "[dim]no timed kernel yet[/]"
    f = max(0.0, min(1.0, fraction))
    n = int(round(f * width))
    colour = "$success" if f >= 0.7 else "$warning" if f >= 0.4 else "$error"
    return f"[{colour}]{'█' * n}[/][dim]{'░' * (width - n)}[/] {100 * fraction:.0f}%"


def chart_markup(t: TargetView | None, width: int, height: int) -> str:
    """The chart as Textual markup lines for a box of `width`×`height` cells."""
    if t is None:
        return "[dim]no target yet[/]"
    if width < AXIS + 10 or height < 5:
        best = f"{t.best_speedup:.2f}×" if t.best_speedup else "—"
        return f"best {best} · {len(t.points)} exp · SoL {100 * (t.best_sol or 0):.0f}%"
    legend = "[$success]◆[/]kept [$accent]•[/]pass [$error]×[/]fail [$success]─[/]best [dim]┈[/]eager"
    if t.compile_speedup:
        legend += f" [$warning]╌[/]compile {t.compile_speedup:.2f}×"
    note = "" if t.meaningful else " [dim](CPU)[/]"
    sol_line = f"SoL of best {_sol_bar(t.best_sol, max(5, width - 18))}"
    rows = height - 3  # legend, x axis, SoL
    cols = width - AXIS
    pts = t.points
    timed = [p.speedup for p in pts if p.speedup is not None]
    top = max([1.0, t.compile_speedup or 0.0, *timed]) * 1.08
    grid = [[" "] * cols for _ in range(rows)]
    colours = [[""] * cols for _ in range(rows)]

    def y_of(v: float) -> int:
        return max(0, min(rows - 1, rows - 1 - int(round(v / top * (rows - 1)))))

    def put(y: int, x: int, ch: str, colour: str, over: bool = True) -> None:
        if 0 <= x < cols and (over or grid[y][x] == " "):
            grid[y][x], colours[y][x] = ch, colour

    for x in range(cols):
        put(y_of(1.0), x, "┈", "dim")
        if t.compile_speedup:
            put(y_of(t.compile_speedup), x, "╌", "$warning")
    if pts:
        first, last = pts[0].experiment, pts[-1].experiment
        span = max(1, last - first)

        def x_of(n: int) -> int:
            return int((n - first) * (cols - 1) / span) if len(pts) > 1 else 0

        frontier = t.frontier
        j, best = 0, None
        for x in range(cols):  # the step line of the best so far
            while j < len(frontier) and x_of(frontier[j][0]) <= x:
                best = frontier[j][1]
                j += 1
            if best:
                put(y_of(best), x, "─", "$success")
        # the points, in one pass with plain arithmetic (thousands of them): kept over passed over failed
        scale = (rows - 1) / top
        xs = (cols - 1) / span if len(pts) > 1 else 0.0
        floor_y = rows - 1
        marks: dict[tuple[int, int], int] = {}
        for p in pts:
            x = int((p.experiment - first) * xs)
            if not p.passed or p.speedup is None:
                key, rank = (floor_y, x), 1
            else:
                y = rows - 1 - int(round(p.speedup * scale))
                key, rank = (min(rows - 1, max(0, y)), x), 3 if p.kept else 2
            if marks.get(key, 0) < rank:
                marks[key] = rank
        glyphs = {1: ("×", "$error"), 2: ("•", "$accent"), 3: ("◆", "$success")}
        for (y, x), rank in marks.items():
            if rank == 1 and grid[y][x] not in (" ", "┈", "╌", "─"):
                continue
            ch, colour = glyphs[rank]
            put(y, x, ch, colour)
    lines = [legend + note]
    for y in range(rows):
        value = top * (rows - 1 - y) / (rows - 1)
        label = f"{value:5.2f}×│" if y % 2 == 0 or rows < 8 else "      │"
        cells = []
        run_colour, run = None, []
        for x in range(cols):
            c = colours[y][x]
            if c != run_colour and run:
                cells.append(f"[{run_colour}]{''.join(run)}[/]" if run_colour else "".join(run))
                run = []
            run_colour = c
            run.append(grid[y][x])
        if run:
            cells.append(f"[{run_colour}]{''.join(run)}[/]" if run_colour else "".join(run))
        lines.append(f"[dim]{label}[/]" + "".join(cells))
    if pts:
        left, right = f"#{pts[0].experiment}", f"#{pts[-1].experiment} ({len(pts)} exp)"
        lines.append("[dim]" + " " * (AXIS - 1) + "└" + left + right.rjust(max(1, cols - len(left))) + "[/]")
    else:
        lines.append("[dim]" + " " * (AXIS - 1) + "└ no experiment decided yet[/]")
    lines.append(sol_line)
    return "\n".join(lines)


class SpeedupChart(Titled, Widget):
    DEFAULT_CSS = "SpeedupChart { height: 1fr; min-height: 6; }"

    def __init__(self, **kw):
        super().__init__(**kw)
        self._target: TargetView | None = None
        self._key: tuple | None = None
        self._drawn: tuple | None = None

    def show(self, state: SessionState) -> None:
        t = state.target
        key = (t.name, len(t.points), len(t.frontier), t.compile_speedup, t.best_sol) if t else None
        if key == self._key:
            return
        self._key, self._target = key, t
        self.set_title(f"speedup vs eager · {t.name}" if t else "speedup vs eager")
        self.refresh()

    def render(self) -> Content:
        size = (self.content_size.width, self.content_size.height)
        if self._drawn is None or self._drawn[0] != (self._key, size):  # a resize or new points: draw again
            self._drawn = ((self._key, size), Content.from_markup(chart_markup(self._target, *size)))
        return self._drawn[1]
