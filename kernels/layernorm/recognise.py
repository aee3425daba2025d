"""How the profiler sees a layer norm: the aten layer_norm, nn.LayerNorm, or a module that subtracts
the mean and divides by the root of the variance."""

from __future__ import annotations

from torch import nn

from autokernel.engine.attribution import NORM_OPS, rows_cols

OPS = frozenset({"layer_norm", "native_layer_norm"})
MODULES = (nn.LayerNorm,)
NAMES = ("layernorm",)
NAME_RANK = 20


def pattern(ops):
    s = set(ops)
    if s <= OPS:
        return True
    has_root = bool(s & {"rsqrt", "sqrt", "reciprocal", "div"})
    return s <= NORM_OPS | {"sub", "var", "var_mean", "std"} and "sub" in s and bool(s & {"mean", "var_mean"}) \
        and has_root


def shape(ops):
    return rows_cols(ops, {"layer_norm", "native_layer_norm", "mean", "var", "var_mean"})
