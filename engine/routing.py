"""Which kernel types can reach the model: the planner asks the patch itself before any search.

A KernelBench problem is searched only for kernel types whose kernel `kernel_patch.patch` would route a
call of the model's forward to (`kernel_patch.routed_calls`, the patch with probe kernels): the profiler
names a row `reduce` for a `mean` or a sum over dim 1, and `layernorm` for `F.layer_norm`, calls the patch
has no route for, and a kernel found for those could never be used. Plan and patch agree by construction.
"""

from __future__ import annotations

from typing import Any, Callable

ROUTED = "routed_calls"  # the profile row's key: calls of one forward the patch routes to the row's kind


def routed_calls(model: Any, inputs: list) -> dict[str, int] | None:
    """{kind: calls of one forward of `model(*inputs)` the patch routes to that kind}; patches `model` in
    place (pass one that is thrown away after). None when the probe's forward fails (the model ran when
    profiled, so the patch's probe is at fault): nothing is known, and the plan is left as it is."""
    from .kernel_patch import routed_calls as probe

    try:
        return probe(model, inputs)
    except Exception:
        return None


def mark_routes(rows: list[dict], counts: dict[str, int] | None) -> list[dict]:
    """`rows` (profile rows as dicts), each of a probed kernel type with its count under ROUTED."""
    for row in rows:
        if counts is not None and row.get("kind") in counts:
            row[ROUTED] = counts[row["kind"]]
    return rows


def routable(plan: list[dict], rows: list[dict], log: Callable[[str], None]) -> list[dict]:
    """The plan's targets whose kind a call of the model routes to; a row never probed (an old session,
    another integration mode) keeps its target."""
    kept = []
    for p in plan:
        if rows[p["row"]].get(ROUTED) == 0:
            log(f"skipping {p['kind']}: no call of the model's forward matches a {p['kind']} kernel's contract "
                f"(the patch would route none to it), so a kernel found for it could not be used")
            continue
        kept.append(p)
    return kept
