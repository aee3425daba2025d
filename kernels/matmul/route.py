"""How a kept matmul kernel reaches a model: torch.matmul, @ and torch.mm of [..., K] x [K, N], and
F.linear (so every nn.Linear: x @ weight.T, the transposed weight cached, the bias added after).

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import torch
import torch.nn.functional as F

from autokernel.engine.kernel_patch import Op, Route, needs_grad, rows


def _matmul(args, kwargs, entry):
    if kwargs or len(args) != 2:
        return None
    a, b = args
    if not entry.accepts(a, b) or a.dtype != b.dtype or b.dim() != 2 or a.dim() < 2 or a.shape[-1] != b.shape[0] \
            or needs_grad(a, b):
        return None
    return "matmul", (a, b)


def _linear(args, kwargs, entry):
    a = dict(zip(("input", "weight", "bias"), args))
    a.update(kwargs)
    x, w, bias = a.get("input"), a.get("weight"), a.get("bias")
    if set(a) - {"input", "weight", "bias"} or not entry.accepts(x, w) or x.dtype != w.dtype \
            or w.dim() != 2 or x.dim() < 1 or x.shape[-1] != w.shape[1] or needs_grad(x, w, bias):
        return None
    return "linear", (x, w), (lambda y: y + bias) if bias is not None else None


ROUTE = Route(
    "matmul",
    ops=[Op("matmul", "Tensor a, Tensor b", lambda a, b: ((*a.shape[:-1], b.shape[1]), a.dtype),
            lambda s, a, b: s.entry.fn(rows(a, a.shape[-1]), b.contiguous()).reshape(*a.shape[:-1], b.shape[1]),
            reference=lambda a, b: torch.matmul(a, b), site="matmul"),
         Op("linear", "Tensor x, Tensor weight", lambda x, w: ((*x.shape[:-1], w.shape[0]), x.dtype),
            lambda s, x, w: s.entry.fn(rows(x, w.shape[1]), s.transposed(w)).reshape(*x.shape[:-1], w.shape[0]),
            reference=lambda x, w: F.linear(x, w), site="linear")],
    functions={torch.matmul: _matmul, torch.Tensor.matmul: _matmul, torch.Tensor.__matmul__: _matmul,
               torch.mm: _matmul, F.linear: _linear},
)
