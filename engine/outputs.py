"""What a forward returns, as the outputs the checks compare one by one.

Every kernel type and most KernelBench problems return one tensor. A problem's `Model.forward` may
return several (`return y, y.sum(dim=-1)`: a tuple or a list); then a whole-problem ModelNew must return
as many, in the same order, and each is compared with its reference under the same rules, named by its
position ("output 1") so that a failure says which one differs. A single output keeps no name: the
checks of a one-tensor result read exactly as they always did.

A user's model may return more than tensors (a dict, a nest of tuples, an output object with `logits`);
`tensors` flattens any of them into the tensors an integration compares, so the model integration and
the KernelBench check (`engine/integrate.py`, `engine/model_new.py`) read a forward the same way.
"""

from __future__ import annotations

from typing import Any, Iterator

COMPARE_CHUNK = 1 << 24  # elements compared at once in float64 (128 MiB a temporary), whatever the output's size


def chunks(t: Any) -> Iterator[tuple[int, Any]]:
    """(start, slice) over a tensor's flattened values, COMPARE_CHUNK at a time: comparisons in float64 of a
    multi-GB output, whole, would take several times its size."""
    flat = t.detach().reshape(-1)
    for start in range(0, flat.numel(), COMPARE_CHUNK):
        yield start, flat[start:start + COMPARE_CHUNK]


class OutputCountError(ValueError):
    """The outputs are not as many as the reference's (or not a sequence where several are expected)."""


def several(value: Any) -> bool:
    """Whether `value` is a sequence of outputs (a tuple or list) rather than one output."""
    return isinstance(value, (tuple, list))


def as_list(value: Any) -> list:
    """The outputs of `value` in order: its items when it holds several, else `[value]`."""
    return list(value) if several(value) else [value]


def paired(out: Any, ref: Any) -> list[tuple[str, Any, Any]]:
    """(name, output, reference) per output: one unnamed pair for a single reference output; for a
    reference that returns several, one named pair each. OutputCountError, with the plain reason, when
    `out` is not a tuple or list of as many."""
    if not several(ref):
        return [("", out, ref)]
    if not several(out):
        raise OutputCountError(f"returned {type(out).__name__}, expected {len(ref)} outputs (a tuple of tensors)")
    if len(out) != len(ref):
        raise OutputCountError(f"returned {len(out)} outputs, expected {len(ref)}")
    return [(f"output {i}", o, r) for i, (o, r) in enumerate(zip(out, ref))]


def tensors(out: Any) -> list:
    """The tensors of a forward's result, in order: a tensor; the items of a list, tuple or dict, nested;
    or the `logits`, `last_hidden_state` or `loss` of an output object. Anything else holds none."""
    import torch  # here only: the rest of this module needs no torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensors(o)]
    for name in ("logits", "last_hidden_state", "loss"):
        if hasattr(out, name):
            return tensors(getattr(out, name))
    return []
