"""Autotuned candidates in the check's stages: each config timed briefly, since the stages judge results.

Triton's autotuner times every config with `do_bench` (25 + 100 ms budgets by default) on the first call of each
new key, and the stages call a candidate with a dozen or more new keys (shapes, dtypes, views): a check would
spend seconds timing choices nobody keeps, since the bench request loads the candidate afresh and tunes at its
own shape with the full timing. Inside `brief(module, device)` each config still runs (a config that
fails to build or crashes still counts as the autotuner would count it), the fastest of a short look is
chosen, and the stages check what it computes. On the CPU interpreter, which has no device timer for the
autotuner at all, a config is looked at by the wall clock, so a multi-config candidate can be checked, benched
and integrated there.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from types import ModuleType
from typing import Any, Callable, Iterator

from .precompile import autotuners

WARMUP_MS = 1  # `triton.testing.do_bench`'s warm-up and repeat budgets for one config (its defaults: 25, 100)
REP_MS = 3


def brief_timer(device: str) -> Callable[..., Any]:
    """A stand-in for the autotuner's benchmarker with its call shape (`fn, quantiles=...`): a short look."""
    if device == "cuda":
        import triton.testing

        def on_gpu(fn: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
            return triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, quantiles=quantiles)

        return on_gpu

    def by_wall_clock(fn: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
        start = time.perf_counter()
        fn()
        ms = (time.perf_counter() - start) * 1e3
        return [ms] * len(quantiles) if quantiles else ms

    return by_wall_clock


def _slot(tuner: Any) -> str:
    """The instance attribute the autotuner reads its benchmarker from: newer Triton keeps a `do_bench`
    property over `_do_bench`, older Triton a plain `do_bench` attribute."""
    return "_do_bench" if isinstance(inspect.getattr_static(type(tuner), "do_bench", None), property) else "do_bench"


@contextlib.contextmanager
def brief(module: ModuleType | None, device: str) -> Iterator[list[Any]]:
    """While inside: the module's autotuners time each config with `brief_timer(device)`; restored after."""
    tuners = autotuners(module)
    timer = brief_timer(device)
    saved: list[tuple[Any, str, bool, Any]] = []
    for tuner in tuners:
        slot = _slot(tuner)
        had = slot in vars(tuner)
        saved.append((tuner, slot, had, vars(tuner).get(slot)))
        setattr(tuner, slot, timer)
    try:
        yield tuners
    finally:
        for tuner, slot, had, value in saved:
            if had:
                setattr(tuner, slot, value)
            else:
                vars(tuner).pop(slot, None)


def on_the_interpreter(module: ModuleType | None, device: str) -> None:
    """For the rest of this process, the module's autotuners look at configs by the wall clock where Triton's
    interpreter runs them (it gives the autotuner no timer): for a module loaded to be run and let go, as a
    worker's request or integration's kept kernels are."""
    if device == "cuda":
        return
    timer = brief_timer(device)
    for tuner in autotuners(module):
        setattr(tuner, _slot(tuner), timer)
