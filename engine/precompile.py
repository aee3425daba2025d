"""Compile a candidate's specializations in parallel before the five stages call them one by one.

Triton compiles a kernel on its first call for each new set of constexprs and argument properties
(dtype, 16-byte divisibility), so the stages, calling the candidate shape after shape in one thread,
pay one cold compile after another: on the H100 the shape sweep alone took 7-10 s of a 16 s
experiment. Much of a compile runs outside the GIL (the MLIR passes in C++, ptxas as a subprocess),
so calling the candidate once per (shape, dtype) the stages will use, from a pool of threads, fills
Triton's caches in a fraction of that time, and the stages then find every kernel compiled.

The calls here judge nothing: results and errors are dropped, and the stages (which run afterwards,
watched, in one thread) decide. It is skipped where it cannot help or could mislead: on the CPU
interpreter (nothing to compile, and the interpreter is not thread-safe), and for a candidate with
`@triton.autotune` (configs timed concurrently would be chosen on distorted times and cached).
Off unless AUTOKERNEL_PARALLEL_COMPILE=1, until a GPU run has measured it.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

from . import harness

ENV = "AUTOKERNEL_PARALLEL_COMPILE"
MAX_THREADS = 8


def enabled() -> bool:
    return os.environ.get(ENV, "") == "1"


def autotuned(module: ModuleType | None) -> bool:
    """Whether the candidate's module holds a Triton autotuner (a kernel under @triton.autotune)."""
    if module is None:
        return False
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return False
    return any(isinstance(v, Autotuner) for v in vars(module).values())


def specializations(ctx: harness.CheckContext) -> list[tuple[dict, Any]]:
    """Every (shape, dtype) the stages will call the candidate with on contiguous inputs, each once."""
    dtypes = harness._dtypes(ctx)
    sweep, _ = harness._sweep_shapes(ctx)
    shapes = [ctx.spec.smoke_shape, *sweep, *harness._stability_shapes(ctx),
              *harness._edge_shapes(ctx)[0]]
    seen, pairs = set(), []
    for shape in shapes:
        for dtype in dtypes:
            key = (json.dumps(shape, sort_keys=True), str(dtype))
            if key not in seen:
                seen.add(key)
                pairs.append((shape, dtype))
    return pairs


def warm(ctx: harness.CheckContext, module: ModuleType | None = None, threads: int | None = None) -> int:
    """Call the candidate once per specialization from a thread pool; the number of calls made (0: skipped)."""
    if ctx.interpreter or autotuned(module):
        return 0
    pairs = specializations(ctx)
    if not pairs:
        return 0

    def call(pair: tuple[dict, Any]) -> None:
        shape, dtype = pair
        try:
            ctx.kernel_fn(*harness.make_args(ctx, shape, dtype, "normal"))
        except Exception:  # the stages will meet it again, and say so
            pass

    workers = threads or min(MAX_THREADS, os.cpu_count() or 1, len(pairs))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ak-precompile") as pool:
        list(pool.map(call, pairs))
    if ctx.device == "cuda":
        import torch

        try:
            torch.cuda.synchronize()
        except Exception:  # a fault: the first stage reports it
            pass
    return len(pairs)
