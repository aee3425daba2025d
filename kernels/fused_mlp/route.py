"""How a kept fused-MLP kernel reaches a model: the forward of a SwiGLU MLP module (exactly three
bias-free linears as its children, gate/up/down, w_gate/w_up/w_down or w1/w3/w2, plus at most an
activation or dropout) is replaced; the linears inside it are then left alone.

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import torch.nn as nn

from autokernel.engine.kernel_patch import Op, Route, needs_grad, rows

_EXTRAS = (nn.SiLU, nn.Dropout, nn.Identity)


def _linears(m):
    """(gate, up, down) of a SwiGLU MLP module (a block that merely holds such linears is not one)."""
    children = list(m.children())
    linears = [c for c in children if isinstance(c, nn.Linear)]
    if len(linears) != 3 or any(not isinstance(c, (nn.Linear, *_EXTRAS)) for c in children):
        return None
    for names in (("gate_proj", "up_proj", "down_proj"), ("w_gate", "w_up", "w_down"), ("w1", "w3", "w2"),
                  ("gate", "up", "down")):
        parts = [getattr(m, n, None) for n in names]
        if all(isinstance(p, nn.Linear) and p.bias is None for p in parts):
            gate, up, down = parts
            if gate.weight.shape == up.weight.shape and down.in_features == gate.out_features:
                return parts
    return None


def _module_args(m, linears, entry, x):
    gate, up, down = linears
    weights = (gate.weight, up.weight, down.weight)
    if not entry.accepts(x, *weights) or x.shape[-1] != gate.in_features or needs_grad(x, *weights):
        return None
    return (x, *weights)


ROUTE = Route(
    "fused_mlp",
    ops=[Op("fused_mlp", "Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down",
            lambda x, g, u, d: ((*x.shape[:-1], d.shape[0]), x.dtype),
            lambda s, x, g, u, d: s.entry.fn(rows(x, g.shape[1]), g, u, d).reshape(*x.shape[:-1], d.shape[0]))],
    match=_linears,
    module_args=_module_args,
)
