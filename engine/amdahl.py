"""Amdahl's law over the profile: which bottleneck, brought to its floor, speeds the model up most.

For a row with share p of the model's time and achievable kernel speedup s = t_now / t_floor,
the end-to-end bound is S = 1 / ((1 - p) + p / s). Ranking by S is ranking by the time that could
be saved, p * (1 - 1/s), which is what the optimize loop should spend its budget on.
"""

from __future__ import annotations

import math
from typing import Any, Iterable


def kernel_speedup(t_now_ms: float, t_floor_ms: float) -> float:
    """s = t_now / t_floor, at least 1 (a kernel at its floor is never slower than measured);
    infinite when the floor is zero (nothing to move or compute) but time was spent."""
    if t_now_ms <= 0:
        return 1.0
    if t_floor_ms <= 0:
        return math.inf
    return max(1.0, t_now_ms / t_floor_ms)


def end_to_end_bound(p: float, s: float) -> float:
    """S = 1 / ((1 - p) + p / s) with p clamped to [0, 1] and s to >= 1 (s may be infinite)."""
    if math.isnan(p) or math.isnan(s):
        raise ValueError("share and speedup must be numbers")
    p = min(max(p, 0.0), 1.0)
    s = max(s, 1.0)
    rest = (1.0 - p) + (0.0 if math.isinf(s) else p / s)
    return math.inf if rest <= 0 else 1.0 / rest


def time_saved_fraction(p: float, s: float) -> float:
    """The share of the model's time a row would give back at its floor: p * (1 - 1/s)."""
    p = min(max(p, 0.0), 1.0)
    s = max(s, 1.0)
    return p * (1.0 - (0.0 if math.isinf(s) else 1.0 / s))


def _get(row: Any, key: str) -> Any:
    return row[key] if isinstance(row, dict) else getattr(row, key)


def rank(rows: Iterable[Any]) -> list:
    """Rows (dicts or objects with `share` and `kernel_speedup`) sorted by the end-to-end bound,
    largest first; ties broken by share, so of two rows that could save the same, the bigger leads."""
    return sorted(
        rows,
        key=lambda r: (end_to_end_bound(_get(r, "share"), _get(r, "kernel_speedup")), _get(r, "share")),
        reverse=True,
    )
