"""How a kept attention kernel reaches a model: F.scaled_dot_product_attention on q, k, v [B, H, S, D] of
one shape, with no mask, no dropout, no GQA and the default scale, causal or not, is routed to it.

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import math

import torch.nn.functional as F

from autokernel.engine.kernel_patch import Op, Route, needs_grad, same_as_input

_NAMES = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")


def _sdpa(args, kwargs, entry):
    a = dict(zip(_NAMES, args))
    a.update(kwargs)
    q, k, v = a.get("query"), a.get("key"), a.get("value")
    extra = set(a) - set(_NAMES)
    scale = a.get("scale")
    if extra or a.get("attn_mask") is not None or a.get("dropout_p", 0.0) or not entry.accepts(q, k, v) \
            or q.dim() != 4 or q.shape != k.shape or q.shape != v.shape or a.get("enable_gqa") \
            or (scale is not None and abs(scale - 1 / math.sqrt(q.shape[-1])) > 1e-12) or needs_grad(q, k, v):
        return None
    return "flash_attention", (q, k, v, bool(a.get("is_causal", False)))


ROUTE = Route(
    "flash_attention",
    ops=[Op("flash_attention", "Tensor q, Tensor k, Tensor v, bool causal", same_as_input,
            lambda s, q, k, v, causal: s.entry.fn(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal),
            reference=lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
            site="scaled_dot_product_attention")],
    functions={F.scaled_dot_product_attention: _sdpa},
)
