"""Which shapes the stages run on the CPU interpreter, and an exact account of those they don't.

Under Triton's interpreter the sweep's large shapes take minutes, so they can't run at full size; but a
kernel often has a code path only they reach (a softmax's wide-row path above 32768 columns), and a check
that merely skipped them passed a planted bug there (issue 20). So a shape too large is run as a stand-in
with the spec's batch dims cut to a few rows (same widths, same path, as far as the widths choose it),
and every shape not run at full size is reported, with its stand-in if it had one: in the stage's detail,
in the CheckReport, and in the verdict line, which then never says "all five stages".
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

# Cuts tried for the batch dims, largest first: an odd count above one still meets a row mask.
BATCH_CUTS = (3, 2, 1)


def stand_in(shape: dict, batch_dims: Iterable[str], fits: Callable[[dict], bool]) -> dict | None:
    """`shape` with its batch dims cut to the largest of `BATCH_CUTS` that `fits`; None when none does
    (or the spec names no batch dims)."""
    dims = [d for d in batch_dims if d in shape and not isinstance(shape[d], bool)]
    if not dims:
        return None
    for n in BATCH_CUTS:
        cut = {k: (min(int(v), n) if k in dims else v) for k, v in shape.items()}
        if fits(cut):
            return cut
    return None


def plan(shapes: Iterable[dict], batch_dims: Iterable[str], fits: Callable[[dict], bool]) -> tuple[list[dict], list[dict]]:
    """(the shapes to run, in order and without repeats; one entry per shape not run at full size:
    {"shape": it, "checked_as": its stand-in or None})."""
    run: list[dict] = []
    unrun: list[dict] = []
    batch_dims = tuple(batch_dims)
    for shape in shapes:
        shape = dict(shape)
        if fits(shape):
            if shape not in run:
                run.append(shape)
            continue
        if any(u["shape"] == shape for u in unrun):
            continue
        sub = stand_in(shape, batch_dims, fits)
        unrun.append({"shape": shape, "checked_as": sub})
        if sub is not None and sub not in run:
            run.append(sub)
    return run, unrun


def fmt(shape: dict) -> str:
    """'rows=4096,cols=50257': short enough to list several in one line."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def describe(unrun: list[dict]) -> str:
    """One clause naming every shape not run at full size ('' when none): those checked at a smaller
    batch (with the cut) and those not checked at all."""
    cut = [u for u in unrun if u["checked_as"] is not None]
    none = [u for u in unrun if u["checked_as"] is None]
    parts = []
    if cut:
        parts.append("checked only cut down: " + "; ".join(
            f"{fmt(u['shape'])} as {fmt({k: v for k, v in u['checked_as'].items() if u['shape'][k] != v})}" for u in cut))
    if none:
        parts.append("not checked: " + "; ".join(fmt(u["shape"]) for u in none))
    return ("too large for the CPU interpreter, " + "; ".join(parts)) if parts else ""


def merge(*lists: list[dict]) -> list[dict]:
    """The entries of several plans, each shape once."""
    out: list[dict] = []
    for entry in (e for lst in lists for e in lst):
        if not any(o["shape"] == entry["shape"] for o in out):
            out.append(entry)
    return out


def total_shapes(*groups: Iterable[Any]) -> int:
    """How many distinct shapes the groups hold together (the M of 'N of M shapes')."""
    seen: list[dict] = []
    for s in (dict(s) for g in groups for s in g):
        if s not in seen:
            seen.append(s)
    return len(seen)
