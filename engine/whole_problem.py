"""When a KernelBench problem also gets a whole-problem target beside its kernel-type targets, and which of the two
routes its ModelNew takes.

A kernel-type target speeds up only its own rows; the rest of the problem (a conv and its epilogue, a GEMM's
activation) stays eager, where Inductor's seed of the whole problem fuses it. So where the kernel types cover
little of the profiled time, the whole problem is searched first; where they cover most of it, it is the
fallback, searched only if no kernel-type target kept a kernel faster than eager. At integration the faster
route is taken: the whole ModelNew's measured speedup against the kernel-type kernels' speedups carried to the
problem by Amdahl's law.
"""

from __future__ import annotations

from typing import Any

from .problem_spec import PROBLEM_TARGET
from .search_state import slower_than_eager

# Below this share of the profiled time in rows of the planned kernel types, the whole problem goes first.
WHOLE_FIRST_BELOW = 0.8
FALLBACK = "fallback"  # the plan entry's mark of a whole-problem target searched only if needed
# What a needed fallback is kept under an experiment cap: Inductor's seed, which runs its kernels at the first
# launch config Inductor's heuristic lists (untimed), and the seed's first move, which times the listed configs as
# torch.compile does on a GPU (or lays a conv out as it would): the seed alone is often far from compile's speed.
FALLBACK_EXPERIMENTS = 2


def covered_share(plan: list[dict], rows: list[dict]) -> float:
    """The share of the rows' time in rows whose kind is one of the plan's kernel types (of the rows' own sum:
    time the profiler could not put in any row counts for neither side)."""
    kinds = {p["kind"] for p in plan}
    total = sum(float(r.get("share") or 0.0) for r in rows)
    covered = sum(float(r.get("share") or 0.0) for r in rows if r.get("kind") in kinds)
    return covered / total if total > 0 else 0.0


def with_whole_target(plan: list[dict], rows: list[dict], entry: dict) -> tuple[list[dict], str]:
    """The plan with the whole-problem entry placed first (the plan's kernel types cover less than
    WHOLE_FIRST_BELOW of the time) or as the fallback (last, marked), and a line that says which and why."""
    share = covered_share(plan, rows)
    said = f"the kernel types cover {100 * share:.0f}% of the profiled time: the whole problem ({PROBLEM_TARGET!r})"
    if share < WHOLE_FIRST_BELOW:
        return [entry, *plan], f"{said} is searched first"
    return [*plan, {**entry, FALLBACK: True}], (f"{said} is the fallback, searched if none of them keeps a kernel "
                                                "faster than eager")


def fallback_not_needed(targets: dict[str, Any]) -> str:
    """Why a fallback whole-problem target is left out ("" when it is needed): a kernel-type target kept a
    kernel faster than eager (on the CPU, where timings mean nothing, any kept kernel counts)."""
    for t in targets.values():
        if t.name != PROBLEM_TARGET and t.best is not None and not slower_than_eager(t.best):
            return f"{t.name} kept a kernel ({t.best.candidate_id}) faster than eager"
    return ""


def fallback_reserve(targets: dict[str, Any], experiments: int, max_experiments: int | None, name: str) -> str | None:
    """Why kernel-type target `name` ends now: the last FALLBACK_EXPERIMENTS of the budget are the fallback's,
    while the fallback is still needed and not started. None under no experiment cap (the fallback comes at the
    kernel types' plateau), for the whole-problem target itself, and before the target's starter ran (a kernel
    type is planned first: it is never left without a measurement)."""
    if name == PROBLEM_TARGET or max_experiments is None or PROBLEM_TARGET in targets:
        return None
    if name not in targets or not targets[name].candidates:
        return None
    left = max_experiments - experiments
    if left <= 0 or left > FALLBACK_EXPERIMENTS or fallback_not_needed(targets):  # at 0 the budget itself ends it
        return None
    return (f"the last {left} experiment(s) are kept for the "
            "whole-problem fallback (no kernel kept is faster than eager)")


def kernel_route_speedup(use: list[tuple[Any, Any]], rows: list[dict]) -> float | None:
    """The problem's speedup over eager with these kernel-type bests swapped in, by Amdahl's law over the
    profile (each kernel type's rows at its best's measured speedup); None where a speedup was not measured."""
    kept_time, share = 0.0, 0.0
    for t, best in use:
        x = (best.bench or {}).get("speedup_eager")
        if not x or not (best.bench or {}).get("meaningful", True):
            return None
        s = sum(float(r.get("share") or 0.0) for r in rows if r.get("kind") == t.name)
        share += s
        kept_time += s / x
    share = min(share, 1.0)
    rest = (1.0 - share) + kept_time
    return 1.0 / rest if rest > 0 else None


def choose_route(use: list[tuple[Any, Any]], rows: list[dict]) -> tuple[list[tuple[Any, Any]], str]:
    """The bests ModelNew uses: the whole problem's or the kernel types', not both (a whole ModelNew replaces
    Model's forward), and a line that says why ("" when there was no choice). Where either speedup was not
    measured (the CPU) the whole ModelNew is kept, as it covers the whole problem."""
    whole = [(t, b) for t, b in use if t.name == PROBLEM_TARGET]
    kernels = [(t, b) for t, b in use if t.name != PROBLEM_TARGET]
    if not whole or not kernels:
        return use, ""
    b = whole[0][1].bench or {}
    whole_x = b.get("speedup_eager") if b.get("meaningful", True) else None
    kernel_x = kernel_route_speedup(kernels, rows)
    if whole_x is None or kernel_x is None:
        return whole, "ModelNew is the whole-problem kernel (speedups not measured here to compare the routes)"
    if kernel_x > whole_x:
        return kernels, (f"ModelNew swaps in the kernel-type kernels ({kernel_x:.2f}x eager by Amdahl's law) over "
                         f"the whole-problem kernel ({whole_x:.2f}x eager measured)")
    return whole, (f"ModelNew is the whole-problem kernel ({whole_x:.2f}x eager measured) over the kernel-type "
                   f"kernels ({kernel_x:.2f}x eager by Amdahl's law)")

