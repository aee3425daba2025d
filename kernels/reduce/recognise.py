"""How the profiler sees a reduction: a sum, mean, max, norm... the user called outside any other kind."""

from __future__ import annotations

from autokernel.engine.attribution import REDUCE_OPS, rows_cols

OPS = REDUCE_OPS


def shape(ops):
    return rows_cols(ops, REDUCE_OPS)
