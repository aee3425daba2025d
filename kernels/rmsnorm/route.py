"""How a kept RMSNorm kernel reaches a model: the forward of an RMSNorm module (a class named so, with a
1-D `weight` and `eps`, `variance_epsilon` or `epsilon`, or nn.RMSNorm) is replaced.

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import torch
import torch.nn as nn

from autokernel.engine.kernel_patch import Op, Route, needs_grad, rows, same_as_input


def _eps(m):
    for name in ("eps", "variance_epsilon", "epsilon"):
        v = getattr(m, name, None)
        if isinstance(v, (int, float)):
            return float(v)
    return None


def _match(m):
    """(eps,) of an RMSNorm module (eps None: nn.RMSNorm's default, the dtype's epsilon), else None."""
    w = getattr(m, "weight", None)
    if "rmsnorm" in type(m).__name__.lower() and isinstance(w, torch.Tensor) and w.dim() == 1 \
            and (_eps(m) is not None or isinstance(m, getattr(nn, "RMSNorm", ()))):
        return (_eps(m),)
    return None


def _module_args(m, state, entry, x):
    w, (eps,) = m.weight, state
    if not entry.accepts(x, w) or x.shape[-1] != w.numel() or needs_grad(x, w):
        return None
    return x, w, eps if eps is not None else torch.finfo(x.dtype).eps


ROUTE = Route(
    "rmsnorm",
    ops=[Op("rmsnorm", "Tensor x, Tensor weight, float eps", same_as_input,
            lambda s, x, w, eps: s.entry.fn(rows(x, w.numel()), w, eps).reshape(x.shape))],
    match=_match,
    module_args=_module_args,
)
