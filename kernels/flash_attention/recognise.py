"""How the profiler sees attention: a scaled_dot_product_attention call (or one of its backends)."""

from __future__ import annotations

from autokernel.engine.attribution import SDPA_PREFIXES

OP_PREFIXES = SDPA_PREFIXES


def shape(ops):
    for op in ops:
        if op.short.startswith(SDPA_PREFIXES):
            args = op.tensor_args()
            if args and len(args[0][0]) == 4:
                b, h, s, d = args[0][0]
                causal = any(v is True for v in op.concrete[3:7])
                return {"batch": b, "heads": h, "seq": s, "head_dim": d, "causal": causal}
    return None
