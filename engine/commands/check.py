"""`autokernel check [CANDIDATE.py] --kernel NAME`: the five stages on one candidate, in a worker.

Exit 0 when every stage passes, 1 when the candidate fails, 2 for bad input to the tool.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserError
from .common import add_device_flag, add_json_flag, print_json

HELP = "run the five correctness stages on a candidate kernel (default: the starter) in an isolated worker"

_STYLE = {"pass": "green", "fail": "red", "crash": "red", "timeout": "red", "skipped": "dim", "running": "yellow"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("candidate", nargs="?", help="a Python file that defines kernel_fn (default: the kernel's starter)")
    p.add_argument("--kernel", required=True, help="kernel type (see `autokernel kernels`)")
    p.add_argument("--backend", choices=("triton", "cuda"), default="triton", help="which starter to check (default: triton)")
    p.add_argument("--stage-timeout", type=float, default=None, metavar="S", help="seconds a stage may take (default: 120, or $AUTOKERNEL_STAGE_TIMEOUT)")
    add_device_flag(p)
    add_json_flag(p)


def resolve_candidate(candidate: str | None, kernel: str, backend: str) -> tuple[str, Path]:
    """(kernel name, candidate path), with one-line errors for anything the user got wrong."""
    from autokernel.kernels import get_spec

    try:
        spec = get_spec(kernel)
    except ValueError as e:
        raise UserError(str(e)) from None
    if candidate is None:
        if backend not in spec.starters:
            raise UserError(f"{kernel} has no {backend} starter (it has: {', '.join(spec.backends) or 'none'})")
        return spec.name, Path(spec.starters[backend])
    path = Path(candidate)
    if not path.is_file():
        raise UserError(f"{candidate}: no such file")
    return spec.name, path


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from ..devices import resolve_device
    from ..worker import Worker

    kernel, path = resolve_candidate(args.candidate, args.kernel, args.backend)
    device = resolve_device(args.device)
    if args.backend == "cuda" and device != "cuda":
        raise UserError("the cuda backend needs a CUDA GPU (this run is on cpu)")
    err = Console(stderr=True)

    def progress(stage: str, status: str, detail: str, seconds: float) -> None:
        if status == "running":
            return
        colour = _STYLE.get(status, "white")
        err.print(f"  [{colour}]{status:>7}[/] {stage:<12} {seconds:6.2f}s  {escape(detail)}", highlight=False, markup=True,
                  soft_wrap=True)

    err.print(f"checking {escape(str(path))} as {kernel} ({args.backend}) on {device}")
    with Worker(device=device, stage_timeout=args.stage_timeout) as worker:
        report = worker.check(str(path), kernel=kernel, backend=args.backend, on_stage=progress)
    if report.error and not any(s.detail == report.error for s in report.stages):
        err.print(f"  [red]rejected[/]: {escape(report.error)}")
    if args.json:
        print_json(report.to_json())
    else:
        verdict = f"[green]PASSED[/] {escape(report.coverage())}" if report.passed else "[red]FAILED[/]"
        Console().print(f"{escape(path.name)}: {verdict}")
    return 0 if report.passed else 1
