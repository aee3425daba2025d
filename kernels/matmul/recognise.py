"""How the profiler sees a matmul in a model: any matmul-like operator the user called (F.linear, @, bmm...)."""

from __future__ import annotations

from autokernel.engine.attribution import MATMUL_OPS, matmul_mnk

OPS = MATMUL_OPS


def shape(ops):
    for op in ops:
        mnk = matmul_mnk(op) if op.short in MATMUL_OPS else None
        if mnk:
            b, m, n, k = mnk
            return {"M": b * m, "N": n, "K": k}
    return None


def exact(ops):
    """The spec is [M,K] x [K,N]: a batched matmul with per-batch weights is not it (its bytes come from
    the operators instead, and it is no target)."""
    for op in ops:
        mnk = matmul_mnk(op) if op.short in MATMUL_OPS else None
        if mnk:
            return mnk[0] == 1
    return False
