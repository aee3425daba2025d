"""How a kept LayerNorm kernel reaches a model: the forward of each nn.LayerNorm is replaced, with or without
its weight and bias (elementwise_affine=False, bias=False: None goes to the kernel). The normalized dims are
flattened: one row is math.prod(normalized_shape) wide.

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import math

import torch.nn as nn

from autokernel.engine.kernel_patch import Op, Route, needs_grad, rows, same_as_input


def _match(m):
    """The row width of an nn.LayerNorm (a state, so never None for one), else None."""
    return math.prod(m.normalized_shape) if isinstance(m, nn.LayerNorm) else None


def _module_args(m, cols, entry, x):
    w, b = m.weight, m.bias
    params = [t for t in (w, b) if t is not None]
    normalized = tuple(m.normalized_shape)
    if not entry.accepts(x, *params) or x.dim() < len(normalized) \
            or tuple(x.shape[x.dim() - len(normalized):]) != normalized \
            or needs_grad(x, *params) or len({t.dtype for t in params}) > 1:
        return None
    return x, w, b, float(m.eps), cols


def _flat(t):
    return t.reshape(-1) if t is not None else None


ROUTE = Route(
    "layernorm",
    ops=[Op("layernorm", "Tensor x, Tensor? weight, Tensor? bias, float eps, int cols", same_as_input,
            lambda s, x, w, b, eps, cols: s.entry.fn(rows(x, cols), _flat(w), _flat(b), eps).reshape(x.shape))],
    match=_match,
    module_args=_module_args,
)
