"""How a kept reduce kernel reaches a model: torch.sum and Tensor.sum over the last dim (keepdim or not)
are routed to it.

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import torch

from autokernel.engine.kernel_patch import Op, Route, needs_grad, rows


def _sum(args, kwargs, entry):
    a = dict(zip(("input", "dim", "keepdim"), args))
    a.update(kwargs)
    x, dim = a.get("input"), a.get("dim")
    if isinstance(dim, (tuple, list)) and len(dim) == 1:
        dim = dim[0]
    if len(args) > 3 or set(a) - {"input", "dim", "keepdim"} or not entry.accepts(x) or x.dim() < 1 \
            or not isinstance(dim, int) or dim not in (-1, x.dim() - 1) or needs_grad(x):
        return None
    return "reduce", (x,), (lambda y: y.unsqueeze(-1)) if a.get("keepdim") else None


ROUTE = Route(
    "reduce",
    ops=[Op("reduce", "Tensor x", lambda x: (x.shape[:-1], x.dtype),
            lambda s, x: s.entry.fn(rows(x, x.shape[-1])).reshape(x.shape[:-1]),
            reference=lambda x: x.sum(-1), site="sum")],
    functions={torch.sum: _sum, torch.Tensor.sum: _sum},
)
