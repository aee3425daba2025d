"""Compile a candidate's specializations in parallel before the five stages call them one by one.

Triton compiles a kernel on its first call for each new set of constexprs and argument properties
(dtype, 16-byte divisibility), so the stages, calling the candidate shape after shape in one thread,
pay one cold compile after another. Much of a compile runs outside the GIL (the MLIR passes in C++,
ptxas as a subprocess), so calling the candidate once per (shape, dtype, layout) the stages will use,
from a pool of threads, fills Triton's caches in a fraction of that time, and the stages then find
every kernel compiled.

The calls here judge nothing: results and errors are dropped, and the stages (which run afterwards,
watched, in one thread) decide. An autotuned kernel only compiles here, every config of it, without
launching or timing one (configs timed concurrently would be chosen on distorted times and cached): the
stages' first call times them one after another, already compiled. Skipped on the CPU interpreter
(nothing to compile, and the interpreter is not thread-safe). On unless AUTOKERNEL_PARALLEL_COMPILE=0
(`scripts/precompile_probe.py` and `scripts/multigpu_bench.py sessions --warmup both` measure it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, Iterator

from . import harness

ENV = "AUTOKERNEL_PARALLEL_COMPILE"
MAX_THREADS = 8


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() != "0"


def autotuners(module: ModuleType | None) -> list[Any]:
    """The Triton autotuners in a candidate's module, also under wrappers such as `@triton.heuristics`."""
    if module is None:
        return []
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return []
    found: list[Any] = []
    for value in list(vars(module).values()):
        depth = 0
        while value is not None and depth < 8:  # a wrapper keeps what it wraps in `.fn`
            if isinstance(value, Autotuner) and not any(value is f for f in found):
                found.append(value)
            value, depth = getattr(value, "fn", None), depth + 1
    return found


def _compile_configs(tuner: Any, *args: Any, **kwargs: Any) -> None:
    """In place of `Autotuner.run` while warming: compile each config the autotuner would time, launch none."""
    configs = tuner.configs
    if getattr(tuner, "early_config_prune", None):
        configs = tuner.early_config_prune(configs, dict(zip(tuner.arg_names, args)), **kwargs)
    kwargs = {**kwargs, "warmup": True}  # JITFunction.run compiles and returns the kernel, launching nothing
    for config in configs:
        tuner.fn.run(*args, **kwargs, **config.all_kwargs())


@contextlib.contextmanager
def compile_only(module: ModuleType | None) -> Iterator[list[Any]]:
    """While inside: the module's autotuned kernels compile every config when called, and run none."""
    tuners = autotuners(module)
    for tuner in tuners:
        tuner.run = functools.partial(_compile_configs, tuner)  # the instance's, ahead of the class's
    try:
        yield tuners
    finally:
        for tuner in tuners:
            vars(tuner).pop("run", None)


def specializations(ctx: harness.CheckContext) -> list[tuple[dict, Any, bool]]:
    """Every (shape, dtype, non-contiguous) the stages will call the candidate with, each once: a strided view
    is a specialization of its own (Triton keys a compile on each pointer's alignment and each stride of 1)."""
    dtypes = harness._dtypes(ctx)
    sweep, _ = harness._sweep_shapes(ctx)
    edge = harness._edge_shapes(ctx)[0]
    calls = [(shape, False) for shape in [ctx.spec.smoke_shape, *sweep, *harness._stability_shapes(ctx), *edge]]
    calls += [(shape, True) for shape in harness.view_shapes(ctx, edge)]
    seen, found = set(), []
    for shape, noncontig in calls:
        for dtype in dtypes:
            key = (json.dumps(shape, sort_keys=True), str(dtype), noncontig)
            if key not in seen:
                seen.add(key)
                found.append((shape, dtype, noncontig))
    return found


def warm(ctx: harness.CheckContext, module: ModuleType | None = None, threads: int | None = None) -> int:
    """Call the candidate once per specialization from a thread pool; the number of calls made (0: skipped)."""
    if ctx.interpreter:
        return 0
    calls = specializations(ctx)
    if not calls:
        return 0

    def call(item: tuple[dict, Any, bool]) -> None:
        shape, dtype, noncontig = item
        try:
            args = harness.make_args(ctx, shape, dtype, "normal")
            ctx.kernel_fn(*(harness.noncontiguous_args(ctx, args) if noncontig else args))
        except Exception:  # the stages will meet it again, and say so
            pass

    workers = threads or min(MAX_THREADS, os.cpu_count() or 1, len(calls))
    with compile_only(module), ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ak-precompile") as pool:
        list(pool.map(call, calls))
    if ctx.device == "cuda":
        import torch

        try:
            torch.cuda.synchronize()
        except Exception:  # a fault: the first stage reports it
            pass
    return len(calls)
