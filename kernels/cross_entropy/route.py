"""How a kept cross-entropy kernel reaches a model: F.cross_entropy of 2-D logits and 1-D int targets,
mean reduction, no weight or label smoothing, ignore_index -100, is routed to it.

Standalone like the patch (imports torch and the patch only): `autokernel export` ships it inside
`_patch.py`."""

import torch
import torch.nn.functional as F

from autokernel.engine.kernel_patch import Op, Route, needs_grad

_NAMES = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")


def _cross_entropy(args, kwargs, entry):
    a = dict(zip(_NAMES, args))
    a.update(kwargs)
    x, t = a.get("input"), a.get("target")
    if a.get("weight") is not None or a.get("size_average") is not None or a.get("reduce") is not None \
            or a.get("reduction", "mean") != "mean" or a.get("label_smoothing", 0.0) \
            or not entry.accepts(x) or x.dim() != 2 or not isinstance(t, torch.Tensor) \
            or t.dim() != 1 or t.dtype not in (torch.int64, torch.int32) \
            or a.get("ignore_index", -100) != -100 or needs_grad(x):
        # The kernel's contract skips rows whose target is -100 (F.cross_entropy's default), so the
        # call is routed without asking the GPU whether any target is ignored (a host sync).
        return None
    return "cross_entropy", (x, t)


ROUTE = Route(
    "cross_entropy",
    ops=[Op("cross_entropy", "Tensor x, Tensor target", lambda x, t: ((), x.dtype),
            lambda s, x, t: s.entry.fn(x.contiguous(), t.contiguous()).to(x.dtype),
            reference=lambda x, t: F.cross_entropy(x, t), site="cross_entropy")],
    functions={F.cross_entropy: _cross_entropy},
)
