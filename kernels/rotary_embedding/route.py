"""How a kept rotary-embedding kernel reaches a model: the forward of a rotary module (a class named so,
with `cos`/`sin` tables [max_seq, D], forward(x [B, H, S, D])) is replaced. The output keeps x's layout
(the starter writes a transposed q in place order, so attention's output reshapes as a view).

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import torch

from autokernel.engine.kernel_patch import Op, Route, needs_grad, same_as_input


def _tables(m):
    """(cos, sin) [max_seq, D] of a rotary-embedding module, else None."""
    cos, sin = getattr(m, "cos", None), getattr(m, "sin", None)
    if "rotary" in type(m).__name__.lower() and isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor) \
            and cos.dim() == 2 and cos.shape == sin.shape:
        return cos, sin
    return None


def _module_args(m, state, entry, x):
    cos, sin = _tables(m)  # read at each call: a module may rebuild its tables
    if not entry.accepts(x, cos, sin) or x.dim() != 4 or x.shape[-1] != cos.shape[-1] \
            or x.shape[-2] > cos.shape[0] or needs_grad(x):
        return None
    return x, cos, sin


ROUTE = Route(
    "rotary_embedding",
    ops=[Op("rotary_embedding", "Tensor x, Tensor cos, Tensor sin", same_as_input,
            lambda s, x, cos, sin: s.entry.fn(x, cos[:x.shape[-2]].to(x.dtype).contiguous(),
                                              sin[:x.shape[-2]].to(x.dtype).contiguous()),
            like_input=True)],
    match=_tables,
    module_args=_module_args,
)
