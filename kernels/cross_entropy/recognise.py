"""How the profiler sees a cross-entropy: F.cross_entropy, nn.CrossEntropyLoss, or log_softmax then
nll_loss on its output in one scope (written out by hand: both make one call)."""

from __future__ import annotations

from torch import nn

from autokernel.engine.attribution import numel

OPS = frozenset({"cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss2d", "nll_loss_forward"})
MODULES = (nn.CrossEntropyLoss,)
NAMES = ("crossentropy",)
NAME_RANK = 40
# (head ops, tail ops, the call's name): a tail on the head's input in the head's scope joins its call
OP_PAIR = (frozenset({"log_softmax", "_log_softmax"}), frozenset({"nll_loss", "nll_loss_nd", "nll_loss2d"}),
           "log_softmax+nll_loss")
_LOSS_OPS = {"cross_entropy_loss", "log_softmax", "_log_softmax", "nll_loss", "nll_loss_nd", "mean", "sum"}


def pattern(ops):
    s = set(ops)
    return s <= _LOSS_OPS and ("cross_entropy_loss" in s or ("log_softmax" in s and bool(s & {"nll_loss", "nll_loss_nd"})))


def shape(ops):
    for op in ops:
        if op.short in ("cross_entropy_loss", "log_softmax", "_log_softmax", "nll_loss", "nll_loss_nd", "nll_loss_forward"):
            args = op.tensor_args()
            if args and len(args[0][0]) >= 2:
                s = args[0][0]
                return {"rows": numel(s) // s[1], "vocab": s[1]}
    return None
