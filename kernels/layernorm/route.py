"""How a kept LayerNorm kernel reaches a model: the forward of each nn.LayerNorm with a weight is replaced
(normalized dims flattened: one row is weight.numel() wide).

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import torch
import torch.nn as nn

from autokernel.engine.kernel_patch import Op, Route, needs_grad, rows, same_as_input


def _module_args(m, state, entry, x):
    w, b = m.weight, m.bias
    if not entry.accepts(x, w) or tuple(x.shape[x.dim() - w.dim():]) != tuple(w.shape) \
            or needs_grad(x, w, b) or (b is not None and b.dtype != w.dtype):
        return None
    return x, w, b, float(m.eps)


ROUTE = Route(
    "layernorm",
    ops=[Op("layernorm", "Tensor x, Tensor weight, Tensor? bias, float eps", same_as_input,
            lambda s, x, w, b, eps: s.entry.fn(rows(x, w.numel()), w.reshape(-1),
                                               (b if b is not None else torch.zeros_like(w)).reshape(-1),
                                               eps).reshape(x.shape))],
    match=lambda m: True if isinstance(m, nn.LayerNorm) and m.weight is not None else None,
    module_args=_module_args,
)
