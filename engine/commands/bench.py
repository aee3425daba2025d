"""`autokernel bench`: every starter that passes the harness, timed against eager and torch.compile.

Per kernel, backend and shape: ms, GB/s or TFLOP/s, percent of the device's measured ceiling and
the speedup over eager and over torch.compile, all measured in the same worker process. Results
are also written to the session store as a `bench` session (BenchResult events).
"""

from __future__ import annotations

import argparse
import sys
import time

from ..errors import UserError
from .common import add_db_flag, add_device_flag, add_json_flag, print_json

HELP = "time every starter (or one kernel/backend) against eager PyTorch and torch.compile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", action="append", default=None, metavar="K", help="only this kernel type (repeatable)")
    p.add_argument("--backend", choices=("triton", "cuda"), default=None, help="only this backend")
    p.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="bf16", help="element type (default: bf16)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (it costs seconds per shape)")
    add_device_flag(p)
    add_json_flag(p)
    add_db_flag(p)


def _shape(shape: dict) -> str:
    return "x".join(f"{v}" for v in shape.values() if not isinstance(v, bool)) + (
        " causal" if shape.get("causal") else "")


def _plan(args, device):
    from autokernel.kernels import all_specs, get_spec

    try:
        specs = [get_spec(k) for k in args.kernel] if args.kernel else all_specs()
    except ValueError as e:
        raise UserError(str(e)) from None
    plan = []
    for spec in specs:
        for backend in spec.backends:
            if args.backend and backend != args.backend:
                continue
            if backend == "cuda" and device != "cuda":
                continue  # CUDA C++ needs a GPU; noted in the output
            shapes = list(spec.bench_shapes) if device == "cuda" else [spec.smoke_shape]
            plan.append((spec, backend, shapes))
    if not plan:
        raise UserError("nothing to bench for these filters" + (" (the cuda backend needs a GPU)" if args.backend == "cuda" else ""))
    return plan


def _rate(x: float) -> str:
    """Three significant digits (a rate below 1 must not print as 0); thousands grouped."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def table_title(ceil, dtype: str) -> str:
    """The table's title: the device and the ceilings its percentages are of; on the CPU, where every
    timing runs under Triton's interpreter, there is no ceiling worth naming (it read "matmul 0 TFLOP/s")."""
    if not ceil.meaningful:
        return (f"{ceil.device_name}, {dtype}; [yellow]no ceilings on the CPU: timings under Triton's interpreter "
                "are NOT meaningful[/]")
    rates = [f"copy {_rate(ceil.bandwidth_gbs)} GB/s" if ceil.bandwidth_gbs > 0 else "copy not measured",
             f"matmul {_rate(ceil.tflops(dtype))} TFLOP/s" if ceil.tflops(dtype) > 0 else "matmul not measured"]
    return f"{ceil.device_name}, {dtype}; ceilings: {', '.join(rates)}"


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from .. import events as ev
    from ..fair_timing import timing_line
    from ..devices import device_name, resolve_device
    from ..roofline import ceilings
    from ..store import Recorder, Store
    from ..worker import Worker

    device = resolve_device(args.device)
    plan = _plan(args, device)
    err = Console(stderr=True)
    store = Store(args.db)
    sid = store.create_session(ev.SessionStarted(kind="bench", model="", device=device, device_name=device_name(device),
                                                 config={"kernels": [s.name for s, _, _ in plan], "dtype": args.dtype}))
    rec = Recorder(store, sid)
    ceil = ceilings(device)
    results, failures = [], []
    status = "completed"
    try:
        with Worker(device=device) as worker:
            for spec, backend, shapes in plan:
                path = str(spec.starters[backend])
                err.print(f"[bold]{spec.name}[/] ({backend}): checking ...", end="")
                started = time.monotonic()
                report = worker.check(path, kernel=spec.name, backend=backend)
                err.print(f" {time.monotonic() - started:.1f} s")
                if not report.passed:
                    bad = report.first_failure
                    why = f"{bad.name}: {bad.detail}" if bad else report.error
                    failures.append({"kernel": spec.name, "backend": backend, "reason": why})
                    err.print(f"  [red]failed the harness[/], not timed: {escape(why)}")
                    rec.emit(ev.ErrorEvent(where=f"{spec.name}/{backend}", message=f"failed the harness: {why}"))
                    continue
                for shape in shapes:
                    err.print(f"  timing {_shape(shape)} {args.dtype} ...", end="")
                    started = time.monotonic()
                    try:
                        (r,) = worker.bench(path, kernel=spec.name, shapes=[shape], dtype=args.dtype, backend=backend,
                                            with_compile=False if args.no_compile else None)
                        err.print(f" {r.kernel_ms:.4g} ms ({time.monotonic() - started:.1f} s)")
                    except RuntimeError as e:
                        err.print("")
                        failures.append({"kernel": spec.name, "backend": backend, "reason": f"timing: {e}"})
                        err.print(f"  [red]timing failed[/]: {escape(str(e))}")
                        continue
                    results.append(r)
                    rec.emit(ev.BenchResult(candidate_id=f"starter:{spec.name}:{backend}", target=spec.name,
                                            shape=r.shape, dtype=r.dtype, device_name=r.device_name, kernel_ms=r.kernel_ms,
                                            eager_ms=r.eager_ms, compile_ms=r.compile_ms, metric=r.metric,
                                            achieved=r.achieved, ceiling=r.ceiling,
                                            fraction_of_ceiling=r.fraction_of_ceiling, speedup_eager=r.speedup_eager,
                                            speedup_compile=r.speedup_compile, meaningful=r.meaningful,
                                            timing=timing_line(r)))
    except KeyboardInterrupt:
        status = "stopped"
        raise
    finally:
        rec.emit(ev.SessionDone(status=status, summary={"timed": len(results), "failed": len(failures)}))
        store.finish_session(sid, status, {"timed": len(results), "failed": len(failures)})

    if args.json:
        print_json({"session": sid, "device": device, "device_name": ceil.device_name, "meaningful": device == "cuda",
                    "ceilings": {"bandwidth_gbs": ceil.bandwidth_gbs, "matmul_tflops": ceil.matmul_tflops},
                    "results": [r.to_json() for r in results], "failed": failures})
        return 0 if not failures else 1
    console = Console(width=None if sys.stdout.isatty() else 170)
    table = Table(title=table_title(ceil, args.dtype), title_justify="left")
    for col in ("kernel", "backend", "shape", "ms", "achieved", "% ceiling", "% copy@size", "eager ms", "compile ms",
                "x eager", "x compile"):
        table.add_column(col, justify="left" if col in ("kernel", "backend", "shape") else "right")
    for r in results:
        table.add_row(r.kernel, r.backend, _shape(r.shape), f"{r.kernel_ms:.4f}", f"{r.achieved:,.0f} {r.metric}"
                      if r.achieved >= 10 else f"{r.achieved:.3g} {r.metric}", f"{100 * r.fraction_of_ceiling:.0f}%" if ceil.meaningful else "-",
                      f"{100 * r.achieved / r.copy_gbs:.0f}%" if r.copy_gbs else "-",
                      f"{r.eager_ms:.4f}", "-" if r.compile_ms is None else f"{r.compile_ms:.4f}",
                      f"{r.speedup_eager:.2f}", "-" if r.speedup_compile is None else f"{r.speedup_compile:.2f}")
    console.print(table)
    if any(r.copy_gbs for r in results):
        console.print("% copy@size: the kernel's GB/s over a plain device copy that moves the same bytes (what full "
                      "bandwidth means at that size)")
    for r in results:
        if timing_line(r):  # the wall clock decided, for eager and torch.compile too
            console.print(f"{r.kernel} ({r.backend}) {_shape(r.shape)}: {escape(timing_line(r))}")
    for f in failures:
        console.print(f"[red]{f['kernel']} ({f['backend']})[/]: {escape(f['reason'])}")
    console.print(f"session {sid}")
    return 0 if not failures else 1
