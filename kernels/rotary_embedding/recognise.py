"""How the profiler sees a rotary embedding: a module or function named like one (rotary, rope), or whose
operators are the multiplies, negation, concatenation and add of rotate-half."""

from __future__ import annotations

from autokernel.engine.attribution import numel

NAMES = ("rotary", "rope")
NAME_RANK = 50


def pattern(ops):
    s = set(ops)
    return s <= {"mul", "add", "sub", "cat", "neg", "stack", "index", "getitem"} and {"mul", "add", "cat", "neg"} <= s


def shape(ops):
    best = None
    for op in ops:
        if op.short == "mul":
            for s, _ in op.tensor_args():
                if len(s) in (3, 4) and (best is None or numel(s) > numel(best)):
                    best = s
    if best is None:
        return None
    b, h, s, d = best if len(best) == 4 else (best[0], 1, best[1], best[2])
    return {"batch": b, "heads": h, "seq": s, "head_dim": d}
