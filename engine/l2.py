"""The L2's set-aside for persisting accesses on a GPU: emptied before every watched and timed call, and a
candidate that sets it aside is refused (issue 19, item 3).

A kernel may ask the L2 to keep its lines (`cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)` and an
access-policy window on the stream); lines kept so survive the timer's L2 flush, so a timed call would read
its inputs from cache, which no caller of the kernel in a model gets. Through the driver API (`libcuda`,
there wherever a GPU is), since PyTorch binds neither call. GPU only: on CPU every function here returns at
once and loads nothing.
"""

from __future__ import annotations

import ctypes
from typing import Any

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06

_driver: list[Any] = []


def _lib() -> Any:
    """libcuda, loaded once (the worker does it before any candidate import)."""
    if not _driver:
        _driver.append(ctypes.CDLL("libcuda.so.1"))
    return _driver[0]


def reset(device: str) -> None:
    """No bytes set aside for persisting lines, and any line that persists demoted to normal, so the next
    L2 flush evicts it. The current thread must hold the CUDA context (it does once a tensor is on the GPU)."""
    if device != "cuda":
        return
    lib = _lib()
    lib.cuCtxSetLimit(ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE), ctypes.c_size_t(0))
    lib.cuCtxResetPersistingL2Cache()


def persisting_bytes(device: str) -> int:
    """The bytes of L2 set aside for persisting accesses now (0 on CPU, or when the driver can't say)."""
    if device != "cuda":
        return 0
    value = ctypes.c_size_t(0)
    rc = _lib().cuCtxGetLimit(ctypes.byref(value), ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE))
    return int(value.value) if rc == 0 else 0
