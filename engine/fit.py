"""Out of memory: the tool's own limit on this machine, never a wrong answer.

A problem whose Model, ModelNew or starter runs out of memory (torch.OutOfMemoryError, "CUDA out of
memory", the CPU allocator's "can't allocate memory", a MemoryError) did not fail a check: it does not
fit here. `no_fit(error, device)` turns such an error (an exception, or the text a worker sent back)
into the verdict line "does not fit on this GPU: needs X GiB" (the number when the error names one),
and returns "" for any other error, so callers keep their own verdict for those.
"""

from __future__ import annotations

import re

NO_FIT = "does not fit on this"  # how every such verdict begins

_MARKERS = ("OutOfMemoryError", "out of memory", "MemoryError", "can't allocate memory")
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
    """The allocation an out-of-memory message names, in GiB (None when it names none)."""
    m = _GIB.search(text)
    if m:
        return float(m.group(1)) * _UNIT[m.group(2)]
    m = _BYTES.search(text)
    return int(m.group(1)) / 1024 ** 3 if m else None


def no_fit(error: BaseException | str | None, device: str) -> str:
    """"does not fit on this GPU|CPU: needs X GiB" for an out-of-memory error, else ""."""
    if error is None or not _is_oom(error):
        return ""
    where = "GPU" if device == "cuda" else "CPU"
    gib = needs_gib(str(error))
    return f"{NO_FIT} {where}" + (f": needs {gib:.3g} GiB" if gib is not None else "")
