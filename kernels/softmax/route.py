"""How a kept softmax kernel reaches a model: F.softmax, torch.softmax and Tensor.softmax over the last
dim, without a dtype argument, are routed to it.

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import torch
import torch.nn.functional as F

from autokernel.engine.kernel_patch import Op, Route, needs_grad, rows, same_as_input


def _softmax(args, kwargs, entry):
    x = args[0] if args else kwargs.get("input")
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if len(args) > 2 or kwargs.get("dtype") is not None or not entry.accepts(x) or x.dim() < 1 \
            or dim not in (-1, x.dim() - 1) or needs_grad(x):
        return None
    return "softmax", (x,)


ROUTE = Route(
    "softmax",
    ops=[Op("softmax", "Tensor x", same_as_input, lambda s, x: s.entry.fn(rows(x, x.shape[-1])).reshape(x.shape),
            reference=lambda x: torch.softmax(x, -1), site="softmax")],
    functions={F.softmax: _softmax, torch.softmax: _softmax, torch.Tensor.softmax: _softmax},
)
