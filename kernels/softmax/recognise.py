"""How the profiler sees a softmax: the aten softmax, nn.Softmax, or a module whose operators are
exp / sum / divide (with the max subtracted or not)."""

from __future__ import annotations

from torch import nn

from autokernel.engine.attribution import rows_cols

OPS = frozenset({"softmax", "_softmax", "_safe_softmax"})
MODULES = (nn.Softmax,)
NAMES = ("softmax",)
NAME_RANK = 30


def pattern(ops):
    s = set(ops)
    if s <= {"softmax", "_softmax"}:
        return True
    return s <= {"exp", "sum", "div", "amax", "max", "sub", "mul"} and {"exp", "sum", "div"} <= s


def shape(ops):
    return rows_cols(ops, {"softmax", "_softmax", "_safe_softmax", "sum", "amax"})
