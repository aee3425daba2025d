"""How the profiler sees an RMS norm: the aten rms_norm, nn.RMSNorm, or a module that squares, takes
the mean and multiplies by the reciprocal root (Llama's hand-written RMSNorm)."""

from __future__ import annotations

from torch import nn

from autokernel.engine.attribution import NORM_OPS, rows_cols

OPS = frozenset({"rms_norm", "_fused_rms_norm"})
MODULES = tuple(c for c in (getattr(nn, "RMSNorm", None),) if c is not None)
NAMES = ("rmsnorm",)
NAME_RANK = 10


def pattern(ops):
    s = set(ops)
    if s <= OPS:
        return True
    has_root = bool(s & {"rsqrt", "sqrt", "reciprocal", "div"})
    has_square = bool(s & {"pow", "square", "mul"})
    return s <= NORM_OPS and "mean" in s and has_root and has_square


def shape(ops):
    return rows_cols(ops, {"mean", "rms_norm", "_fused_rms_norm", "norm", "linalg_vector_norm", "sum"})
