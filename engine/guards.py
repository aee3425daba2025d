"""What a candidate may not leave behind or replace in the worker it runs in.

Three cheats pass every value check, because the values come out right in the end: an output that is a
tensor subclass computing lazily when the comparison reads it, a background thread that fills the output
after the call returned, and a replaced clock or library function. Each does its work where no timer
looks, so the harness refuses them outright, after import and after every watched call.

The clocks below are taken when this module is first imported, which the worker does before it imports
any candidate: the timer reads them, so a candidate that replaces `time.perf_counter` cannot slow it down.
In-process checks raise the bar rather than prove anything (see `Untouched`).
"""

from __future__ import annotations

import _thread
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import torch

perf_counter = time.perf_counter
monotonic = time.monotonic

# Modules a candidate uses but does not own, besides torch's namespaces and every loaded autokernel
# module: a replaced clock, statistic, thread count or launcher changes what the timer or the harness sees.
# Of these only the functions and classes are watched: their data (torch.cuda._initialized, a hook left
# None) changes as the process runs.
_FOREIGN_MODULES = ("time", "statistics", "threading", "_thread", "triton", "triton.language", "triton.testing",
                    "triton.runtime.jit", "triton.runtime.interpreter")


def _namespaces() -> dict[str, Any]:
    """Name -> module or class whose attributes a candidate must leave as they are, with the classes
    each autokernel module defines (the harness's, the timer's, the specs' and their references)."""
    import torch.nn.functional as F

    out: dict[str, Any] = {"torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor}
    for name in _FOREIGN_MODULES:
        if sys.modules.get(name) is not None:
            out[name] = sys.modules[name]
    out["torch.cuda"], out["torch.cuda.Event"] = torch.cuda, torch.cuda.Event
    jit = sys.modules.get("triton.runtime.jit")
    if jit is not None and isinstance(getattr(jit, "JITFunction", None), type):
        out["triton.runtime.jit.JITFunction"] = jit.JITFunction
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("autokernel."):
            continue
        out[name] = module
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                out[f"{name}.{attr}"] = value
    return out


def _owned_or_torch(name: str) -> bool:
    """Namespaces watched whole: torch's public ones and the harness's own (its limits are data too)."""
    return name.startswith("autokernel.") or name in ("torch", "torch.nn.functional", "torch.Tensor")


class Untouched:
    """A snapshot of the watched namespaces; `changed()` names what was replaced or removed since.
    Attributes added later are not counted (torch and triton load submodules lazily). In-process, so
    a candidate determined to subvert the process it runs in can; the search never writes such code."""

    def __init__(self) -> None:
        self._watched = _namespaces()
        self._before = {(m, n): v for m, obj in self._watched.items() for n, v in list(vars(obj).items())
                        if not n.startswith("__") and (_owned_or_torch(m) or callable(v))}

    def changed(self) -> list[str]:
        return [f"{m}.{n}" for (m, n), v in self._before.items() if vars(self._watched[m]).get(n) is not v]


_ACTIVE: list[Untouched] = []


@contextmanager
def untouched() -> Iterator[Untouched]:
    """Watch the namespaces for the length of the block (one worker request); `replaced()` reads it."""
    watch = Untouched()
    _ACTIVE.append(watch)
    try:
        yield watch
    finally:
        _ACTIVE.remove(watch)


def replaced() -> list[str]:
    """What was replaced since the innermost `untouched()` began ([] outside one)."""
    return _ACTIVE[-1].changed() if _ACTIVE else []


def replaced_reason(changed: list[str], when: str) -> str:
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    return (f"replaced {', '.join(changed[:3])}{more} {when}: a candidate may not patch modules it does not own "
            "(torch, triton, time, the harness)")


# -- threads --------------------------------------------------------------------------------------

def thread_snapshot() -> tuple[frozenset[int], int]:
    """The Python threads running now: threading's idents, and `_thread`'s count (which also sees
    threads started with `_thread.start_new_thread`, which threading does not list)."""
    return frozenset(t.ident for t in threading.enumerate()), _thread._count()


def threads_left(before: tuple[frozenset[int], int], when: str = "after the call returns") -> str:
    """'' when no thread runs now that did not before; else a one-line refusal."""
    idents, count = thread_snapshot()
    new = [t.name for t in threading.enumerate() if t.ident not in before[0]]
    extra = max(len(new), count - before[1])
    if extra <= 0:
        return ""
    names = f" ({', '.join(new[:2])})" if new else ""
    return (f"left {extra} thread(s) running{names} {when}: work on another thread escapes the timer and the "
            "checks; do it all inside the call")


# -- outputs --------------------------------------------------------------------------------------

def output_refusal(out: Any) -> str:
    """'' for a plain torch.Tensor with real storage; else why not. A subclass can compute its values
    when something reads them (the comparison does the work, the timed call none); a meta or fake
    tensor has no values at all."""
    if not isinstance(out, torch.Tensor):
        return ""  # not a tensor at all: the comparison says so, with the output's position
    if type(out) is not torch.Tensor:
        return (f"returned a {type(out).__qualname__} (a torch.Tensor subclass): outputs must be plain tensors "
                "whose values exist when the call returns")
    if out.is_meta or out.device.type == "meta":
        return "returned a meta tensor (no storage): outputs must hold their values when the call returns"
    try:
        out.untyped_storage()
    except Exception as e:  # no storage at all (a wrapper or functional tensor)
        return f"returned a tensor without storage ({type(e).__name__}): outputs must be plain tensors"
    return ""
