"""Device ceilings (memory bandwidth, matmul rate per dtype) and the speed-of-light floor of a kernel.

A floor is only as honest as the ceilings behind it, so the ceilings are measured on the device
itself rather than read from a spec sheet: a large device-to-device copy (read + write bytes) and a
large matmul per dtype, on random data. Measuring takes seconds on a GPU, so the result is cached
per device name and torch version in `$AUTOKERNEL_CACHE_DIR/ceilings.json`
(default `~/.cache/autokernel/`). On CPU a quick measurement (< 2 s) still gives floors, but
timings there are not meaningful (`Ceilings.meaningful` is False).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from .devices import device_name as _device_name

DTYPE_NAMES = ("fp32", "fp16", "bf16")
_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

_memo: dict[str, "Ceilings"] = {}
_memo_lock = threading.Lock()


@dataclass
class Ceilings:
    """What one device can do at best: GB/s through memory and TFLOP/s of matmul per dtype."""

    device_name: str
    bandwidth_gbs: float
    matmul_tflops: dict[str, float]
    measured: bool = True  # measured on this machine (always, today; False only for hand-made test values)
    launch_us: float = 0.0  # the least time any kernel takes (a one-element op): a floor under every floor
    device: str = "cpu"  # cpu | cuda
    torch_version: str = field(default_factory=lambda: torch.__version__)
    measured_at: float = field(default_factory=time.time)

    @property
    def meaningful(self) -> bool:
        """Timings (and so fractions of these ceilings) mean something only on a GPU."""
        return self.device == "cuda"

    def tflops(self, dtype: Any) -> float:
        """The matmul rate for a dtype (torch dtype or name); other dtypes use the fp32 rate."""
        name = dtype_name(dtype)
        return self.matmul_tflops.get(name) or self.matmul_tflops["fp32"]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Ceilings":
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})


def dtype_name(dtype: Any) -> str:
    """'fp32' | 'fp16' | 'bf16' for a torch dtype or name; other dtypes by their torch name."""
    if isinstance(dtype, str):
        low = dtype.lower().removeprefix("torch.")
        aliases = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
        return aliases.get(low, low)
    for name, td in _TORCH_DTYPES.items():
        if dtype == td:
            return name
    return str(dtype).removeprefix("torch.")


def floor_ms(bytes_: float, flops: float, dtype: Any, ceilings: Ceilings) -> float:
    """Speed-of-light time in ms: the slower of moving `bytes_` at full bandwidth and doing
    `flops` at the matmul rate for `dtype`, and never less than one kernel takes (work of any
    size costs at least `launch_us`; no work at all costs nothing)."""
    memory_ms = bytes_ / (ceilings.bandwidth_gbs * 1e9) * 1e3
    compute_ms = flops / (ceilings.tflops(dtype) * 1e12) * 1e3
    launch_ms = ceilings.launch_us / 1e3 if (bytes_ > 0 or flops > 0) else 0.0
    return max(memory_ms, compute_ms, launch_ms, 0.0)


# How far under the floor a time may fall before it is impossible: the ceilings are measured (a large
# copy, the best of a few matmuls, the fastest one-element op), so a kernel can beat them by a little
# (reads alone outpace a copy's read + write), never by a quarter.
FLOOR_SLACK = 0.75


def impossible_time(kernel_ms: float, bytes_: float, flops: float, dtype: Any, ceilings: Ceilings) -> str:
    """Why `kernel_ms` cannot be a real time for work of `bytes_` and `flops` on this device, or ''.
    A time under the speed-of-light floor means the work was not done when timed (a cheat, or work
    that escaped the timer), so it is refused rather than recorded as a speedup. Only where timing
    means something (a GPU): on CPU the interpreter's times are not compared with anything."""
    if not ceilings.meaningful or kernel_ms is None:
        return ""
    floor = floor_ms(bytes_, flops, dtype, ceilings)
    if floor <= 0 or kernel_ms >= FLOOR_SLACK * floor:
        return ""
    return (f"measured {kernel_ms:.4g} ms, under the floor of {floor:.4g} ms for this shape ({bytes_ / 1e6:.4g} MB "
            f"at {ceilings.bandwidth_gbs:.4g} GB/s, {flops / 1e9:.4g} GFLOP at {ceilings.tflops(dtype):.4g} TFLOP/s, "
            f"{ceilings.launch_us:.3g} us per launch): impossible, so the work was not all timed")


# -- the cache --------------------------------------------------------------------------------------
def cache_dir() -> Path:
    return Path(os.environ.get("AUTOKERNEL_CACHE_DIR") or Path.home() / ".cache" / "autokernel").expanduser()


def _cache_file() -> Path:
    return cache_dir() / "ceilings.json"


# Bumped when the way a ceiling is measured changes, so cached numbers of the old method are measured anew.
MEASURE_METHOD = 2


def _cache_key(device_name: str) -> str:
    return f"{device_name} | torch {torch.__version__} | method {MEASURE_METHOD}"


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(_cache_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or corrupt: measure again


def _write_cache(key: str, c: Ceilings) -> None:
    """Merge one entry and replace the file atomically, so a crash never leaves half a file."""
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache()
        data[key] = c.to_json()
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home must not stop a run; we just measure again next time


# -- measuring ------------------------------------------------------------------------------------
@contextlib.contextmanager
def _measuring_lock():
    """One process measures at a time (two at once would share the device and both read low);
    the others wait, then find the result in the cache."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, at worst two measurements
        yield
        return
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        f = open(cache_dir() / "ceilings.lock", "a+")
    except OSError:
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _from_cache(key: str) -> Ceilings | None:
    cached = _read_cache().get(key)
    if not cached:
        return None
    try:
        c = Ceilings.from_json(cached)
    except TypeError:
        return None
    return c if c.bandwidth_gbs > 0 and c.matmul_tflops.get("fp32", 0) > 0 else None


def ceilings(device: str = "cpu", refresh: bool = False) -> Ceilings:
    """The device's ceilings: from memory, else from the cache file, else measured (and cached)."""
    device = "cuda" if str(device).startswith("cuda") else "cpu"
    name = _device_name(device)
    key = _cache_key(name)
    with _memo_lock:
        if not refresh and key in _memo:
            return _memo[key]
        c = None if refresh else _from_cache(key)
        if c is None:
            with _measuring_lock():
                c = None if refresh else _from_cache(key)  # measured by another process meanwhile?
                if c is None:
                    c = _measure_cuda(name) if device == "cuda" else _measure_cpu(name)
                    _write_cache(key, c)
        _memo[key] = c
        return c


MATMUL_CEILING_SHAPES = ((8192, 8192, 8192), (8192, 4096, 4096), (4096, 4096, 4096))  # (M, K, N)


def _measure_cuda(name: str) -> Ceilings:
    """Median times through triton.testing.do_bench (CUDA events, L2 cleared between runs)."""
    from triton.testing import do_bench

    gen = torch.Generator(device="cuda").manual_seed(0)
    n = 256 * 1024 * 1024  # 1 GiB of fp32 per buffer: far beyond L2
    src = torch.rand(n, device="cuda", generator=gen)
    dst = torch.empty_like(src)
    copy_ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    bandwidth = 2 * src.numel() * src.element_size() / (copy_ms * 1e-3) / 1e9
    del src, dst
    rates = {}
    for dname, td in _TORCH_DTYPES.items():
        # The best of a few large shapes: one square product is no upper bound (on the H100 the model's
        # [8192, 4096] x [4096, N] linears ran at 785 TFLOP/s where 8192^3 gave 702). Half a second of
        # warm-up first: an idle GPU starts at a low clock (345 MHz seen on the H100).
        best = 0.0
        for m, k, n in MATMUL_CEILING_SHAPES:
            a = torch.randn(m, k, device="cuda", generator=gen).to(td)
            b = torch.randn(k, n, device="cuda", generator=gen).to(td)
            ms = do_bench(lambda: torch.mm(a, b), warmup=500, rep=300, return_mode="median")
            best = max(best, 2 * m * k * n / (ms * 1e-3) / 1e12)
            del a, b
        rates[dname] = best
    one = torch.rand(1, device="cuda", generator=gen) + 1.0
    launch_ms = do_bench(lambda: one.mul_(1.0), warmup=25, rep=100, return_mode="min")
    torch.cuda.empty_cache()
    return Ceilings(name, bandwidth, rates, measured=True, launch_us=launch_ms * 1e3, device="cuda")


_copy_at: dict[int, float] = {}


def copy_gbs_at(nbytes: int) -> float | None:
    """GB/s (read + write) of a plain device copy that moves `nbytes`, timed as the ceiling is (CUDA).

    The ceiling is a 2 GiB copy; a kernel that moves 64 MB cannot reach it, because launch, ramp-up and
    the last wave's tail cost the same few microseconds at any size. This says what "full bandwidth"
    means at a kernel's own size, so a miss at a small shape can be told from a slow kernel. Memoized
    per size; None off CUDA or for sizes too small to time."""
    if not torch.cuda.is_available() or nbytes < 2 * 1024 * 1024:
        return None
    half = int(nbytes // 2) // 4 * 4
    if half not in _copy_at:
        from triton.testing import do_bench

        src = torch.rand(half // 4, device="cuda")
        dst = torch.empty_like(src)
        ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median")
        _copy_at[half] = 2 * half / (ms * 1e-3) / 1e9
        del src, dst
    return _copy_at[half]


def _best_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """The fastest of `repeats` runs: a ceiling is what the machine can do, and a shared CPU
    only ever makes a run slower."""
    fn()  # warm-up: first-touch pages, library initialisation
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _measure_cpu(name: str) -> Ceilings:
    """A quick measurement (well under 2 s): 32 MiB copies and a 256..512-square matmul per dtype,
    best of a few runs each."""
    gen = torch.Generator().manual_seed(0)
    src = torch.rand(8 * 1024 * 1024, generator=gen)  # 32 MiB: past most last-level caches
    dst = torch.empty_like(src)
    s = _best_seconds(lambda: dst.copy_(src), repeats=7)
    bandwidth = 2 * src.numel() * src.element_size() / s / 1e9
    rates = {}
    for dname, td in _TORCH_DTYPES.items():
        m = 512 if td == torch.float32 else 256  # half types can be slow on CPUs without native support
        a = torch.randn(m, m, generator=gen).to(td)
        b = torch.randn(m, m, generator=gen).to(td)
        s = _best_seconds(lambda: torch.mm(a, b), repeats=3)
        rates[dname] = 2 * m**3 / s / 1e12
    one = torch.rand(1, generator=gen) + 1.0
    launch_s = statistics.median(_best_seconds(lambda: one.mul_(1.0), repeats=20) for _ in range(5))
    return Ceilings(name, bandwidth, rates, measured=True, launch_us=launch_s * 1e6, device="cpu")
