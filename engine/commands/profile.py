"""`autokernel profile MODEL.py`: where the model's time goes, ranked by what a faster kernel could save.

The run is a session in the store (SessionStarted(kind="profile"), ProfileReady, SessionDone), so
it can be listed with `autokernel sessions` and replayed like any other.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path

from .. import events as ev
from ..errors import UserError
from ..model_file import check_model_file
from ..store import Recorder
from .common import add_db_flag, add_device_flag, add_json_flag, open_store, print_json, resolve_model_path

HELP = "profile a model: time per kernel type, its floor on this device, and the Amdahl-ranked speedup bound"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", metavar="MODEL.py", default=None,
                   help="a KernelBench-style model file, or the name of a bundled example (default: llama)")
    add_device_flag(p)
    add_json_flag(p)
    add_db_flag(p)
    p.add_argument("--size", choices=("small", "large"), default=None,
                   help="size of the example models (default: large on cuda, small on cpu)")
    p.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default=None,
                   help="cast the model and its floating-point inputs (default: as the file builds them)")
    p.add_argument("--iters", type=int, default=5, metavar="N", help="profiled forwards (default 5)")
    p.add_argument("--warmup", type=int, default=3, metavar="N", help="forwards before timing (default 3)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows in the table (default 20; --json has all)")
    p.add_argument("--no-stacks", action="store_true",
                   help="skip Python stacks: kernels written as plain functions are then split into their operators")
    p.add_argument("--trace", metavar="PATH", default=None,
                   help="also write the raw profile as a Chrome trace (open in Perfetto or chrome://tracing)")


def _fmt_ms(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _fmt_x(x: float | None) -> str:
    if x is None or math.isinf(x):
        return "∞"
    return f"{x:.2f}x" if x < 100 else f"{x:.0f}x"


def print_table(result, model: str, top: int) -> None:
    from rich.console import Console
    from rich.table import Table

    shown = result.rows[:top] if top > 0 else result.rows
    table = Table(title=f"{model} on {result.device_name}: {result.total_ms:.3f} ms per forward",
                  caption=None if result.meaningful else
                  "CPU run: timings show the method; floors and bounds are meaningful on a GPU",
                  title_justify="left")
    for col, just in (("#", "right"), ("kind", "left"), ("name", "left"), ("calls", "right"), ("shapes", "left"),
                      ("self ms", "right"), ("share", "right"), ("floor ms", "right"), ("s", "right"), ("S", "right")):
        table.add_column(col, justify=just, no_wrap=col != "shapes", overflow="fold")
    for i, r in enumerate(shown, 1):
        calls = f"{r.calls:g}"
        table.add_row(str(i), r.kind, r.name, calls, r.shapes[0] if r.shapes else "", _fmt_ms(r.self_ms),
                      f"{100 * r.share:.1f}%", f"{r.floor_ms:.4g}", _fmt_x(r.kernel_speedup), _fmt_x(r.max_speedup))
    console = Console(width=None if sys.stdout.isatty() else 160)  # a pipe or a file gets the whole table
    console.print(table)
    if len(result.rows) > len(shown):
        console.print(f"({len(result.rows) - len(shown)} more rows: --top 0 or --json shows all)")
    console.print("s: the kernel's speedup at its floor; S: the whole model's speedup if it got there (Amdahl)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..devices import device_name, resolve_device

    if args.iters < 1 or args.warmup < 0:
        raise UserError("--iters must be at least 1 and --warmup at least 0")
    path = check_model_file(resolve_model_path(args.model))  # before a session is recorded for it
    device = resolve_device(args.device)
    trace = None
    if args.trace:
        trace = Path(args.trace).expanduser()
        if not trace.parent.is_dir():
            raise UserError(f"--trace {args.trace}: folder {trace.parent} does not exist")
    store = open_store(args)
    sid = store.create_session(ev.SessionStarted(
        kind="profile", model=str(path.resolve()), device=device, device_name=device_name(device),
        config={"size": args.size, "dtype": args.dtype, "iters": args.iters, "warmup": args.warmup},
    ))
    rec = Recorder(store, sid)
    status = "failed"
    err = Console(stderr=True)
    try:
        # the model's own prints go to stderr: stdout carries only the table or the JSON document
        with err.status("loading the model") as spinner, contextlib.redirect_stdout(sys.stderr):
            from ..model_loading import load_model
            from ..profiling import profile_model

            loaded = load_model(path, device, size=args.size, dtype=args.dtype)
            result = profile_model(loaded, warmup=args.warmup, iters=args.iters,
                                   on_progress=lambda msg: spinner.update(msg), trace_path=trace,
                                   with_stack=not args.no_stacks)
        rows = [r.to_json() for r in result.rows]
        rec.emit(ev.ProfileReady(device=result.device, total_ms=result.total_ms, rows=rows))
        status = "completed"
    except UserError as e:
        rec.emit(ev.ErrorEvent(where="profile", message=str(e)))
        raise
    except KeyboardInterrupt:
        status = "stopped"
        raise
    except Exception as e:
        rec.emit(ev.ErrorEvent(where="profile", message=f"{type(e).__name__}: {e}"))
        raise
    finally:
        summary = {}
        if status == "completed":
            summary = {"total_ms": result.total_ms, "rows": len(result.rows),
                       "top": result.rows[0].name if result.rows else None}
        rec.emit(ev.SessionDone(status=status, summary=summary))
        store.finish_session(sid, status, summary)
        store.close()

    if args.json:
        out = result.to_json()
        out["session"] = sid
        out["model"] = str(path.resolve())
        print_json(out)
    else:
        print_table(result, path.name, args.top)
        print(f"saved as profile session {sid} (autokernel replay {sid} shows it again)", file=sys.stderr)
    return 0
