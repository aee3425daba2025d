"""End-to-end forward timing that can be trusted when two models differ by a few percent.

Two things the integration step needs, and why:
- `time_interleaved`: the forwards (eager, torch.compile, patched, patched + torch.compile) timed in
  alternating rounds, not one after the other. A GPU that heats up (or a clock that drifts) during a long matmul-heavy run makes whichever
  model is timed last look slower; rotating the order every round spreads that over all of them, and
  the spread of the round medians says how much a difference between them can be trusted.
- `SiteTimer`: how long the swapped modules themselves took inside the forward, before and after the
  swap, with device events recorded around each call (on the GPU's own timeline, so a kernel that is
  fast alone but waits on the host inside the model shows up). It answers "did the kernel get faster in
  the model, or did the rest of the model get slower?" when the end-to-end gain misses the profile's
  promise.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable


@dataclass
class ForwardTime:
    """Median ms of one model's forward over all rounds, and how far the round medians spread."""

    ms: float
    spread: float  # (max - min) / median of the per-round medians; 0 with a single round
    rounds: int
    per_round: tuple[float, ...] = ()  # each round's median, in the order the rounds ran


def round_speedups(base: ForwardTime, other: ForwardTime) -> list[float]:
    """base / other round by round: within a round the two ran minutes apart at most, so a GPU that warms
    over the run moves both alike and the ratios stay tight where the round medians spread."""
    return [b / o for b, o in zip(base.per_round, other.per_round) if o > 0]


def _bench_round(fn: Callable[[], Any], device: str, round_ms: float) -> float:
    if device == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=max(1.0, round_ms / 8), rep=round_ms, return_mode="median"))
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def time_interleaved(fns: dict[str, Callable[[], Any]], device: str, rounds: int = 5,
                     round_ms: float = 100.0) -> dict[str, ForwardTime]:
    """Time each of `fns` in `rounds` rounds, the order rotated every round; median of round medians.

    On CUDA each round is a `triton.testing.do_bench` median (L2 flushed between calls) of about
    `round_ms`; on the CPU a round is one call (CPU times under Triton's interpreter mean nothing, and a
    forward there is slow)."""
    if not fns:
        return {}
    names = list(fns)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for r in range(max(1, rounds)):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            per_round[name].append(_bench_round(fns[name], device, round_ms))
    out = {}
    for name, times in per_round.items():
        med = statistics.median(times)
        spread = (max(times) - min(times)) / med if med > 0 and len(times) > 1 else 0.0
        out[name] = ForwardTime(ms=med, spread=spread, rounds=len(times), per_round=tuple(times))
    return out


def compiled_forward(model: Any, inputs: list, notes: list[str], device: str = "cuda",
                     label: str = "torch.compile") -> Callable[[], Any] | None:
    """`torch.compile(model)` warmed up on `inputs` (three calls on a GPU, synchronized; one on the CPU,
    where a forward under Triton's interpreter is slow), as a forward to time; None, with the reason
    appended to `notes`, when it fails (compile can fail on odd models, or find no C++ compiler on the
    CPU: the other numbers stand)."""
    import torch

    try:
        compiled = torch.compile(model)
        for _ in range(3 if device == "cuda" else 1):
            compiled(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        notes.append(f"{label} failed: {type(e).__name__}: {first}")
        return None
    return lambda: compiled(*inputs)


class SiteTimer:
    """Times named sub-modules of a model (grouped by a label) and the whole forward, per forward.

    Forward pre/post hooks record a device event pair around every call of a watched module (CUDA) or
    read the host clock (CPU, where calls are synchronous). Hooks fire through `nn.Module.__call__`, so
    a module whose `forward` was swapped for a kernel is timed the same way as the original."""

    def __init__(self, model: Any, sites: Iterable[tuple[str, str]], device: str):
        self.device = device
        self._pairs: dict[str, list] = {}
        self._open: dict[int, list] = {}
        self._handles = []
        modules = dict(model.named_modules())
        for name, label in sites:
            m = modules.get(name)
            if m is None:
                continue
            self._pairs.setdefault(label, [])
            self._handles.append(m.register_forward_pre_hook(self._pre))
            self._handles.append(m.register_forward_hook(self._post(label)))

    def _stamp(self) -> Any:
        if self.device == "cuda":
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        if self.device == "cuda":
            return float(start.elapsed_time(end))
        return (end - start) * 1e3

    def _pre(self, mod: Any, args: Any) -> None:
        self._open.setdefault(id(mod), []).append(self._stamp())

    def _post(self, label: str) -> Callable:
        def hook(mod, args, output):
            stack = self._open.get(id(mod))
            if stack:
                self._pairs[label].append((stack.pop(), self._stamp()))
        return hook

    def measure(self, run_forward: Callable[[], Any], forwards: int = 3) -> dict[str, float]:
        """ms per forward spent in each label's modules, plus `"forward"` for the whole call."""
        for pairs in self._pairs.values():
            pairs.clear()
        whole = []
        for _ in range(max(1, forwards)):
            start = self._stamp()
            run_forward()
            whole.append((start, self._stamp()))
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
        n = max(1, forwards)
        out = {label: sum(self._elapsed_ms(a, b) for a, b in pairs) / n for label, pairs in self._pairs.items()}
        out["forward"] = sum(self._elapsed_ms(a, b) for a, b in whole) / n
        return out

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def site_breakdown(before: dict[str, float], after: dict[str, float]) -> list[dict[str, float | str]]:
    """Rows {site, before_ms, after_ms} for each label and for the rest of the forward (forward - sites)."""
    labels = [k for k in before if k != "forward"]
    rows: list[dict[str, float | str]] = [
        {"site": k, "before_ms": before[k], "after_ms": after.get(k, 0.0)} for k in labels]
    rest_before = before.get("forward", 0.0) - sum(before[k] for k in labels)
    rest_after = after.get("forward", 0.0) - sum(after.get(k, 0.0) for k in labels)
    rows.append({"site": "rest", "before_ms": rest_before, "after_ms": rest_after})
    return rows


def part_name(row: dict) -> str:
    """'rmsnorm modules', or 'rest of the forward (with the cross_entropy kernels)' for the rest row."""
    if row["site"] != "rest":
        return f"{row['site']} modules"
    return "rest of the forward" + (f" (with the {', '.join(row['includes'])} kernels)" if row.get("includes") else "")


def breakdown_text(rows: list[dict]) -> str:
    """'rmsnorm modules 4.78 -> 0.46 ms, rest of the forward 28.0 -> 31.4 ms per forward'."""
    return ", ".join(f"{part_name(r)} {r['before_ms']:.4g} -> {r['after_ms']:.4g} ms" for r in rows) + " per forward"
