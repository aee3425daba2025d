"""How the profiler sees a SwiGLU MLP: a module that runs three matmuls, a SiLU and a multiply; a class
named like an MLP counts only when its operators agree (a plain GELU MLP is just matmuls)."""

from __future__ import annotations

from autokernel.engine.attribution import MATMUL_OPS, matmul_mnk

NAMES = ("swiglu", "feedforward", "mlp", "ffn")
NAME_RANK = 60
NAME_NEEDS_PATTERN = True


def pattern(ops):
    s = set(ops)
    matmuls = sum(1 for o in ops if o in MATMUL_OPS)
    return matmuls == 3 and "silu" in s and "mul" in s and s <= MATMUL_OPS | {"silu", "mul"}


def shape(ops):
    mms = [(op, matmul_mnk(op)) for op in ops if op.short in MATMUL_OPS]
    mms = [(op, x) for op, x in mms if x]
    if len(mms) < 3:
        return None
    _, (b, m, n, k) = max(mms, key=lambda t: t[1][2])  # gate/up: the widest output
    return {"tokens": b * m, "hidden": k, "intermediate": n}
