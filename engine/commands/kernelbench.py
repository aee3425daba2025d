"""`autokernel kernelbench PATH...`: score the tool on KernelBench-form problems, on this machine.

Each problem is profiled, optimized by the loop (one session each, `autokernel sessions`), turned into
a standalone `ModelNew` with the kept kernels, checked the KernelBench way (fresh `get_inputs()` on
several trials, atol = rtol = 1e-2) and timed against `Model` in eager mode and under torch.compile.
Prints a table per problem and fast_p (or one JSON document with --json): the fraction of all problems,
skipped ones included, that are correct and more than p times faster. `--workers N` (or auto: one per
visible GPU) runs N problems side by side, each in its own process with one GPU (engine/kernelbench_lanes.py).
Ctrl-C stops the problems under way cleanly, prints what finished, and exits 130; `--resume BATCH` continues a
batch that was stopped or killed (the finished problems kept, those cut mid-way resumed from their sessions,
the rest run).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any, TextIO

from ..agents.llm import add_timeout_flag, use_timeout_flag
from ..errors import UserError
from .common import (BackgroundRun, add_db_flag, add_device_flag, add_json_flag, add_workers_flags, check_workers,
                     open_store, print_json)

HELP = ("score the tool on KernelBench-form problems: optimize each, check its ModelNew the KernelBench way, "
        "time it against eager and torch.compile, report fast_p")

FAST_P_NOTE = ("fast_p: of the {n} problems counted (skipped, no-kernel, untimed and no-fit ones included), the fraction that are correct and "
               "more than p times faster than the baseline; p = 0: just correct")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = ("fast_p, per baseline (eager, torch.compile) and p in 0, 1.0, 1.5, 2.0: the fraction of ALL problems of "
                "the batch, skipped and failed ones included (as KernelBench counts), that are correct and more than p "
                "times faster; fast_0 is the fraction correct. A problem is correct when its ModelNew matches Model on "
                "fresh get_inputs() in every trial (atol = rtol = 1e-2). On the CPU timings are computed but marked not "
                "meaningful, and torch.compile is not timed.")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="problem files (Model, get_inputs(), get_init_inputs()) or folders of them, searched "
                        "recursively (a KernelBench checkout's level folders); other .py files are ignored")
    p.add_argument("--resume", default=None, metavar="BATCH_SESSION",
                   help="continue a stopped or killed batch (its id, a unique prefix, or latest) with the problems "
                        "and settings it was started with (give --api-base again if it had one)")
    p.add_argument("--agent", default=None, metavar="playbook|MODEL_STRING",
                   help="the offline playbook agent (default) or a litellm model string. Both write kernels of "
                        "autokernel's kernel types; for a problem with none of them the LLM agent writes the whole "
                        "ModelNew (its own Triton kernels; target 'problem'), and the playbook reports it skipped")
    p.add_argument("--api-base", default=None, metavar="URL",
                   help="an OpenAI-compatible server for the LLM agent (e.g. a local vLLM)")
    add_timeout_flag(p)
    p.add_argument("--max-experiments-per-problem", type=int, default=None, metavar="N",
                   help="experiments per problem, starters included (default 20)")
    p.add_argument("--size", choices=("small", "large"), default=None,
                   help="for problem files that read AUTOKERNEL_MODEL_SIZE (default: large on cuda, small on cpu)")
    p.add_argument("--verbose", "-v", action="store_true", help="print every experiment of every problem (stderr)")
    add_device_flag(p)
    add_workers_flags(p)
    _say_what_workers_mean(p)
    add_db_flag(p)
    add_json_flag(p)


def _say_what_workers_mean(p: argparse.ArgumentParser) -> None:
    """--workers of a batch counts problems run at once, not the workers of one problem's session."""
    for action in p._actions:
        if action.dest == "workers":
            action.help = ("problems run side by side, each in its own process with one GPU and one worker (auto: "
                           "one per visible GPU; on the CPU, 1 unless N asks for more interpreter processes); with "
                           "--ray, every problem runs in turn on the Ray workers")


# -- output --------------------------------------------------------------------------------------
def _speedup(value: float | None, meaningful: bool) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}x" + ("" if meaningful else " (cpu)")


def progress_line(i: int, n: int, r: Any) -> str:
    """One line per finished problem, for the log while a batch runs."""
    line = f"[{i + 1}/{n}] {r.name}: {r.status}"
    if r.status in ("correct", "incorrect"):
        line += (f", {_speedup(r.speedup_eager, r.meaningful)} vs eager, "
                 f"{_speedup(r.speedup_compile, r.meaningful)} vs torch.compile")
    if r.reason and r.status != "correct":
        line += f" — {r.reason}"
    return line + (f" (session {r.session_id})" if r.session_id else "")


def print_report(report: dict, out: TextIO) -> None:
    """The score table (rich), then fast_p per baseline."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=None if out.isatty() else 160)
    problems = report["problems"]
    table = Table(title=f"KernelBench: {len(problems)} of {report['total']} problems on {report['device']}, "
                        f"agent {report['agent']}", title_justify="left")
    for col, kw in (("problem", {}), ("status", {}), ("vs eager", {"justify": "right"}),
                    ("vs compile", {"justify": "right"}), ("kernels", {}), ("session", {"no_wrap": True}),
                    ("note", {"overflow": "fold", "ratio": 1})):
        table.add_column(col, **kw)
    for r in problems:
        timed = r["status"] in ("correct", "incorrect")
        table.add_row(r["name"], r["status"],
                      _speedup(r["speedup_eager"], r["meaningful"]) if timed else "—",
                      _speedup(r["speedup_compile"], r["meaningful"]) if timed else "—",
                      ", ".join(r["kernels"]) or "—", r["session_id"] or "—", r["reason"])
    console.print(table)
    from ..kernelbench import TIE_MARGIN, status_counts

    counts = status_counts(r["status"] for r in problems)
    console.print("statuses: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    scores = Table(title="fast_p", title_justify="left")
    scores.add_column("p", justify="right")
    for base in ("eager", "compile"):
        scores.add_column(f"vs {base}", justify="right")
    for key in report["fast_p"]["eager"]:
        scores.add_row(key, *("—" if report["fast_p"][b][key] is None else f"{report['fast_p'][b][key]:.2f}"
                              for b in ("eager", "compile")))
    console.print(scores)
    console.print(FAST_P_NOTE.format(n=report["counted"]))
    tied = report.get("fast_1_ties") or {}
    if report["meaningful"] and any(tied.values()):
        console.print(f"of those fast_1.0 counts, {tied.get('eager', 0)} against eager and {tied.get('compile', 0)} against "
                      f"torch.compile are faster by {TIE_MARGIN:.0%} or less: ties at the timer's noise")
    if not report["meaningful"]:
        console.print("CPU run: timings under Triton's interpreter are not meaningful (torch.compile is timed on "
                      "a GPU only); the statuses are.")
    if not report["complete"]:
        console.print(f"stopped: {report['counted']} of {report['total']} problems finished; fast_p counts those.")
        if report.get("batch_session"):
            console.print(f"continue the batch with: {resume_command(report)}")
    if report.get("batch_session"):
        console.print(f"batch session {report['batch_session']}; each problem's run: autokernel-tui --replay SESSION")


def resume_command(report: dict) -> str:
    """How to continue a batch that did not finish (the server is named by the user: its URL may hold a key)."""
    return (f"autokernel kernelbench --resume {report['batch_session']}"
            + (" --api-base URL" if report.get("api_base") else ""))


# -- running -------------------------------------------------------------------------------------
def _command_line() -> str:
    """The command as typed, kept with the batch's score (so a table can be re-made)."""
    return "autokernel " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def run(args: argparse.Namespace) -> int:
    use_timeout_flag(args)  # before any agent is built
    if args.resume:
        batch, n = _resumed_batch(args)
    else:
        batch, n = _new_batch(args)
    report, interrupted = _run_stoppable(batch)
    if report is None:
        return 130
    if args.json:
        print_json(report)
    else:
        print_report(report, sys.stdout)
    if interrupted or not report["complete"]:
        return 130
    return 1 if any(p["status"] == "error" for p in report["problems"]) else 0


def _how_it_runs(config: Any, args: argparse.Namespace) -> None:
    """--workers as problems side by side (engine/kernelbench_lanes.py), each with one worker; with --ray, one
    problem at a time on the Ray workers."""
    from ..kernelbench_lanes import lane_count

    config.lanes = lane_count(args.workers, args.ray, config.device)
    config.workers, config.ray = (1, None) if config.lanes > 1 else (args.workers, args.ray)
    config.verbose = args.verbose


def _listeners(args: argparse.Namespace, config: Any) -> list:
    """--verbose's printer of every problem's experiments (side by side, each child prints its own)."""
    if not args.verbose or config.lanes > 1:
        return []
    from .optimize import HeadlessPrinter

    return [HeadlessPrinter(sys.stderr)]


def _progress(n: int) -> dict[str, Any]:
    """The batch's on_start / on_result: one line each on stderr."""
    def start(i: int, p: Any) -> None:
        print(f"[{i + 1}/{n}] {p.name}: optimizing ({p.path})", file=sys.stderr, flush=True)

    return {"on_start": start, "on_result": lambda i, r: print(progress_line(i, n, r), file=sys.stderr, flush=True)}


def _new_batch(args: argparse.Namespace) -> tuple[Any, int]:
    from ..devices import resolve_device
    from ..kernelbench import BatchConfig, discover
    from ..kernelbench_lanes import batch_class
    from ..session import make_agent

    if not args.paths:
        raise UserError("give problem files or folders (PATH...), or --resume BATCH_SESSION to continue a batch")
    agent = args.agent or "playbook"
    per_problem = 20 if args.max_experiments_per_problem is None else args.max_experiments_per_problem
    if per_problem <= 0:
        raise UserError("--max-experiments-per-problem must be a positive number")
    device = resolve_device(args.device)
    problems, ignored = discover(args.paths)
    if not problems:
        raise UserError(f"no problem files under {' '.join(args.paths)} (a problem defines Model and get_inputs())")
    make_agent(agent, args.api_base)  # an agent that cannot be built fails here, once, not per problem
    if ignored:
        print(f"ignoring {len(ignored)} .py file(s) that define no Model and get_inputs(): "
              + ", ".join(f.name for f in ignored[:5]) + (" ..." if len(ignored) > 5 else ""), file=sys.stderr)
    check_workers(args, device)
    config = BatchConfig(device=device, agent=agent, max_experiments=per_problem,
                         size=args.size, api_base=args.api_base, command=_command_line())
    _how_it_runs(config, args)
    n = len(problems)
    return batch_class(config)(problems, config, open_store(args), listeners=_listeners(args, config),
                               **_progress(n)), n


def _resumed_batch(args: argparse.Namespace) -> tuple[Any, int]:
    """The stored batch, refused in one line where the flags would change how it runs."""
    from ..devices import resolve_device
    from ..kernelbench_lanes import batch_class
    from ..kernelbench_resume import load_batch, refuse_changed_settings
    from ..session import make_agent

    refuse_changed_settings([("PATH", args.paths), ("--agent", args.agent), ("--size", args.size),
                             ("--max-experiments-per-problem", args.max_experiments_per_problem)])
    store = open_store(args)
    stored = load_batch(store, args.resume, api_base=args.api_base, device=args.device)
    resolve_device(stored.config.device)  # a cuda batch on a machine without one fails here
    check_workers(args, stored.config.device)
    _how_it_runs(stored.config, args)  # how it runs now: not part of the batch
    make_agent(stored.config.agent, args.api_base)
    n = len(stored.problems)
    cut = ", ".join(f"{stored.problems[i].name} resumes from session {sid}" for i, sid in stored.to_resume.items())
    print(f"resuming batch {stored.batch_id}: {stored.finished} of {n} problems finished"
          + (f"; {cut}" if cut else ""), file=sys.stderr)
    for i, r in enumerate(stored.kept):
        print(progress_line(i, n, r), file=sys.stderr)
    return batch_class(stored.config).resuming(stored, store, listeners=_listeners(args, stored.config),
                                               **_progress(n)), n


def _run_stoppable(batch: Any) -> tuple[dict | None, bool]:
    """Run the batch; the first Ctrl-C (or SIGTERM) stops it cleanly, a second leaves at once (report
    None). Returns (report, interrupted)."""
    job = BackgroundRun(batch.run, "autokernel-kernelbench")
    ended = job.wait_stopping(batch.stop, "stopping the current problem (Ctrl-C again to leave now; its session "
                                          "can be resumed)" if batch.lanes == 1 else
                              "stopping the problems under way (Ctrl-C again to leave now; their sessions can be "
                              "resumed)")
    if ended == "left":
        return None, True
    return job.result(), ended == "stopped"
