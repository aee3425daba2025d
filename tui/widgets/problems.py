"""The KernelBench problem table: each problem's status and speedups, updated as the batch goes.

Its border title counts the problems; its subtitle holds fast_p over the problems finished so far.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from autokernel.engine.kernelbench import Problem, ProblemResult, fast_p

COLUMNS = (("#", 3), ("problem", 28), ("status", 9), ("vs eager", 12), ("vs compile", 12), ("kernels", 16),
           ("note", 60))
STATUS_STYLES = {"correct": "bold green", "no-kernel": "yellow", "incorrect": "bold red", "error": "bold red", "skipped": "yellow",
                 "untimed": "magenta", "no-fit": "bold magenta", "stopped": "yellow", "running": "bold",
                 "waiting": "dim"}


def _speedup(value: float | None, meaningful: bool) -> str:
    return "—" if value is None else f"{value:.2f}×" + ("" if meaningful else "*")


def _row(i: int, problem: Problem, result: ProblemResult | None, running: bool) -> tuple[str, ...]:
    if result is None:
        status = "running" if running else "waiting"
        return (str(i + 1), problem.name, status, "", "", "", "")
    timed = result.status in ("correct", "incorrect")
    return (str(i + 1), problem.name, result.status,
            _speedup(result.speedup_eager, result.meaningful) if timed else "—",
            _speedup(result.speedup_compile, result.meaningful) if timed else "—",
            ", ".join(result.kernels) or "—", result.reason)


def score_line(results: list[ProblemResult]) -> str:
    """fast_p over the finished problems, both baselines, one line."""
    score = fast_p(results)
    parts = []
    for base in ("eager", "compile"):
        values = " ".join(f"{p}:{'—' if v is None else f'{v:.2f}'}" for p, v in score[base].items())
        parts.append(f"vs {base} {values}")
    return f"fast_p over {len(results)}: " + " │ ".join(parts)


class ProblemTable(DataTable):
    """One row per problem (`show(problems, results, running)`); Enter on a finished one replays it.

    Speedups marked * were timed on the CPU, where they mean nothing.
    """

    def __init__(self, **kw):
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self._shown: tuple | None = None

    def on_mount(self) -> None:
        for label, width in COLUMNS:
            self.add_column(label, width=width)

    def show(self, problems: list[Problem], results: list[ProblemResult], running: int | None) -> None:
        rows = tuple(_row(i, p, results[i] if i < len(results) else None, i == running)
                     for i, p in enumerate(problems))
        if rows == self._shown:
            return
        self._shown = rows
        cursor = self.cursor_row
        self.clear()
        for i, cells in enumerate(rows):
            self.add_row(*(Text(c, style=STATUS_STYLES.get(c, "") if k == 2 else "") for k, c in enumerate(cells)),
                         key=str(i))
        if rows:
            self.move_cursor(row=min(cursor, len(rows) - 1), animate=False)
        done = sum(1 for r in results if r.status != "stopped")
        self.border_title = f"KernelBench problems: {len(results)} of {len(problems)} done"
        finished = [r for r in results if r.status != "stopped"]
        self.border_subtitle = score_line(finished) if done else ""
