"""Out of memory: the tool's own limit on this machine, never a wrong answer.

A problem whose Model, ModelNew or starter runs out of memory (torch.OutOfMemoryError, "CUDA out of
memory", the CPU allocator's "can't allocate memory", a MemoryError) did not fail a check: it does not
fit here. `no_fit(error, device)` turns such an error (an exception, or the text a worker sent back)
into the verdict line "does not fit on this GPU: needs X GiB" (the number when the error names one),
and returns "" for any other error, so callers keep their own verdict for those.

The harness and the problem spec give that verdict before anything runs out, from the problem's own
footprint (`Footprint`: its inputs, the reference's and the candidate's outputs, the Model's parameters,
what KernelBench's own check holds at once) against `free_bytes(device)`, and raise `DoesNotFit`, whose
message is the verdict with that footprint as X. `free_bytes` is the one place the budget is read, so a
test (or a user sharing a GPU) caps it with AUTOKERNEL_MEMORY_BUDGET (bytes).
"""

from __future__ import annotations

import gc
import os
import re
from dataclasses import dataclass

NO_FIT = "does not fit on this"  # how every such verdict begins

BUDGET_ENV = "AUTOKERNEL_MEMORY_BUDGET"
_MARKERS = ("OutOfMemoryError", "out of memory", "MemoryError", "can't allocate memory", NO_FIT)
_VERDICT = re.compile(re.escape(NO_FIT) + r" (GPU|CPU)(: needs [\d.e+-]+ GiB)?")
_NEEDS = re.compile(re.escape(NO_FIT) + r" (?:GPU|CPU): needs ([\d.e+-]+) GiB")
_GIB = re.compile(r"[Tt]ried to allocate ([\d.]+) (GiB|MiB|KiB|B)\b")
_BYTES = re.compile(r"allocate (\d+) bytes")
_UNIT = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024 ** 2, "B": 1 / 1024 ** 3}


def _is_oom(error: BaseException | str) -> bool:
    if isinstance(error, MemoryError):
        return True
    if isinstance(error, BaseException):
        import torch

        if isinstance(error, torch.OutOfMemoryError):
            return True
        error = f"{type(error).__name__}: {error}"
    return any(m in error for m in _MARKERS)


def needs_gib(text: str) -> float | None:
    """The footprint a verdict names, or the allocation an out-of-memory message names, in GiB (None when
    it names neither)."""
    m = _NEEDS.search(text)
    if m:
        return float(m.group(1))
    m = _GIB.search(text)
    if m:
        return float(m.group(1)) * _UNIT[m.group(2)]
    m = _BYTES.search(text)
    return int(m.group(1)) / 1024 ** 3 if m else None


def no_fit(error: BaseException | str | None, device: str) -> str:
    """"does not fit on this GPU|CPU: needs X GiB" for an out-of-memory error, else "". A verdict already
    given (a `DoesNotFit`, or its text passed on by a worker) is kept as it was, with its footprint."""
    if error is None or not _is_oom(error):
        return ""
    given = _VERDICT.search(str(error))
    if given:
        return given.group(0)
    gib = needs_gib(str(error))
    return f"{NO_FIT} {_where(device)}" + (f": needs {gib:.3g} GiB" if gib is not None else "")


def _where(device: str) -> str:
    return "GPU" if str(device).startswith("cuda") else "CPU"


def verdict(need_bytes: int, device: str) -> str:
    return f"{NO_FIT} {_where(device)}: needs {need_bytes / 2**30:.3g} GiB"


class DoesNotFit(MemoryError):
    """The problem's own tensors need more memory than the device has free: the message is the verdict."""

    def __init__(self, need_bytes: int, device: str, why: str = ""):
        self.need_bytes = int(need_bytes)
        super().__init__(verdict(need_bytes, device) + (f" ({why})" if why else ""))


@dataclass(frozen=True)
class Footprint:
    """One trial's tensors in their own dtypes, in bytes: `inputs`, one set of `outputs`, the Model's `params`
    (already resident), and `wide`: what float64 copies of the floating inputs, outputs and parameters take."""

    inputs: int
    outputs: int
    params: int = 0
    wide: int = 0

    @property
    def total(self) -> int:
        """What KernelBench's own check holds at once: the inputs, the Model's and ModelNew's outputs, the weights."""
        return self.inputs + 2 * self.outputs + self.params

    @property
    def to_allocate(self) -> int:
        """What a trial still has to allocate (the parameters are there already)."""
        return self.inputs + 2 * self.outputs


def tensor_bytes(values: object) -> int:
    """Bytes of the tensors in a value, a list or a tuple (anything else counts nothing)."""
    import torch

    items = values if isinstance(values, (list, tuple)) else [values]
    return sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))


def free_bytes(device: str) -> int:
    """Bytes this process could still allocate on `device` now: on CUDA the driver's free memory plus what
    PyTorch's caching allocator holds unused; on the CPU the kernel's MemAvailable. AUTOKERNEL_MEMORY_BUDGET
    (bytes) caps it, so a test can give a small problem a small device."""
    free = _device_free(device)
    cap = os.environ.get(BUDGET_ENV, "").strip()
    return min(free, int(float(cap))) if cap else free


def _device_free(device: str) -> int:
    if str(device).startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info()
        return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 2**62  # nothing says: assume it fits, an OutOfMemoryError still says otherwise


def release(device: str) -> None:
    """Give back what this process no longer references: unreachable cycles, and on CUDA the caching
    allocator's unused blocks (so the next problem, or another process, can have them)."""
    gc.collect()
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
