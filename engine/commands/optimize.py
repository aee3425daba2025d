"""`autokernel optimize MODEL.py --headless`: the whole loop without a screen, one line per experiment.

The session runs on a background thread; the main thread waits, answers approval prompts (`--approval
ask`, which needs a terminal) and turns the first Ctrl-C into a clean stop (the current experiment
finishes, the session is marked stopped and can be resumed with `--resume`; SIGTERM does the same); a
second Ctrl-C, or an experiment still under way after the stop's grace (`common.stop_grace_s`), leaves at
once (the session then reads as interrupted and resumes just the same).
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
from typing import Any, TextIO

from .. import events as ev
from ..agents.llm import add_timeout_flag, use_timeout_flag
from ..errors import UserError
from ..fit import NO_FIT
from ..results import STAGES
from ..session_state import compiled_headline
from ..worker_board import WorkerBoard
from .common import (BackgroundRun, add_db_flag, add_device_flag, add_json_flag, add_workers_flags, check_workers,
                     open_store, print_json, resolve_model_path)

HELP = "run the optimize loop headless: profile, search kernels per bottleneck, integrate (see also the TUI)"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `2h`, `1h30m` or plain seconds -> seconds; UserError otherwise."""
    t = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smhd])", t)
        if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*([smhd])", "", t).strip():
            raise UserError(f"cannot read duration {text!r}: use e.g. 90s, 30m, 2h or 1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise UserError(f"duration {text!r} must be positive")
    return seconds


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", metavar="MODEL.py", default=None,
                   help="a KernelBench-style model file, or the name of a bundled example (default: llama)")
    p.add_argument("--headless", action="store_true",
                   help="no screen: print one line per experiment (without it the TUI shows the session)")
    p.add_argument("--agent", default="playbook", metavar="playbook|MODEL_STRING",
                   help="the offline playbook agent (default) or any litellm model string")
    p.add_argument("--api-base", default=None, metavar="URL",
                   help="an OpenAI-compatible server for the LLM agent (e.g. a local vLLM)")
    add_timeout_flag(p)
    add_device_flag(p)
    p.add_argument("--backend", choices=("triton", "cuda"), default="triton",
                   help="which starters to search from (cuda: CUDA C++, needs a GPU; the playbook writes Triton only)")
    p.add_argument("--max-experiments", type=int, default=None, metavar="N", help="stop after N experiments in all")
    p.add_argument("--budget", default=None, metavar="DURATION", help="wall-time budget, e.g. 90s, 30m, 2h")
    p.add_argument("--max-cost", type=float, default=None, metavar="USD", help="stop when the LLM spend reaches USD")
    p.add_argument("--approval", choices=("auto", "ask"), default=None,
                   help="ask: a candidate that beats the best waits for [a]pprove/[r]eject (needs a terminal); "
                        "default auto, or with --resume the mode the session was last in")
    p.add_argument("--size", choices=("small", "large"), default=None, help="size of the example model")
    p.add_argument("--plateau", type=int, default=30, metavar="N",
                   help="move to the next target after N experiments without a new best (default 30)")
    p.add_argument("--stop-at-ceiling", type=float, default=0.95, metavar="FRACTION",
                   help="a target whose best reaches FRACTION of the GPU's measured ceiling is done (default 0.95; 0: never)")
    p.add_argument("--resume", default=None, metavar="SESSION", help="continue a stopped or crashed session (or give a finished one more budget)")
    p.add_argument("--no-integrate", action="store_true", help="skip swapping the kernels into the model at the end")
    add_workers_flags(p)
    add_db_flag(p)
    add_json_flag(p)


class HeadlessPrinter:
    """Turns events into one line per experiment (plus targets, integration, errors). With a pool of workers
    each experiment's line names its worker, and a workers line (device, what each runs, experiments done
    and per hour) follows a target's end, the session's, and a decision once a minute."""

    WORKERS_EVERY_S = 60.0

    def __init__(self, out: TextIO):
        self.out = out
        self.cands: dict[str, dict[str, Any]] = {}
        self.ideas: dict[str, str] = {}
        self.board = WorkerBoard()
        self._workers_printed = 0.0
        self._workers_changed = False  # a decision since the last workers line

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _workers(self, now: float) -> None:
        if len(self.board) > 1 and self._workers_changed:
            self._workers_printed, self._workers_changed = now, False
            self._print("   workers: " + "; ".join(self.board.describe(now)))

    def __call__(self, e: ev.Event) -> None:
        self.board.apply(e)
        if isinstance(e, ev.SessionStarted):
            self._print(f"session started: {e.model} on {e.device_name or e.device}, agent {e.agent}, approval {e.approval}")
        elif isinstance(e, ev.ProfileReady):
            top = ", ".join(f"{r.get('kind')} {100 * float(r.get('share') or 0):.0f}%" for r in e.rows[:5])
            self._print(f"profile: {e.total_ms:.3f} ms per forward; top: {top}")
        elif isinstance(e, ev.TargetStarted):
            parts = [", ".join(f"{k}={v}" for k, v in e.shape.items()), e.dtype, e.backend]  # a whole problem: no shape
            self._print(f"== target {e.target} ({', '.join(p for p in parts if p)})")
        elif isinstance(e, ev.IdeaProposed):
            self.ideas[e.idea_id] = f"[t{e.tier}] {e.title}"
        elif isinstance(e, ev.CandidateWritten):
            self.cands[e.candidate_id] = {"n": e.experiment, "target": e.target,
                                         "idea": self.ideas.get(e.idea_id, "starter") + (f": {e.label}" if e.label and e.label != "starter" else ""),
                                         "stages": {}, "bench": None}
        elif isinstance(e, ev.StageResult):
            c = self.cands.get(e.candidate_id)
            if c is not None:
                c["worker"] = e.worker
            if c is not None and e.status != "running":
                c["stages"][e.stage] = (e.status, e.detail)
        elif isinstance(e, ev.BenchResult):
            c = self.cands.get(e.candidate_id)
            if c is not None:
                c["bench"] = e
        elif isinstance(e, ev.AwaitingApproval):
            self._print(f"   {e.candidate_id} beats the best by {e.speedup:.2f}x: waiting for approval")
        elif isinstance(e, ev.Decision):
            self._decision(e)
            self._workers_changed = True
            if e.ts - self._workers_printed >= self.WORKERS_EVERY_S:
                self._workers(e.ts)
        elif isinstance(e, ev.TargetDone):
            self._workers(e.ts)
            self._print(f"== {e.target} done ({e.reason}); best {e.best_candidate_id}, {e.best_speedup:.3g}x vs eager")
        elif isinstance(e, ev.IntegrationResult) and e.detail.startswith(NO_FIT):
            self._print(f"integration: {e.detail}")  # nothing ran to compare: no "outputs DIFFER"
        elif isinstance(e, ev.IntegrationResult):
            cpu = "" if e.meaningful else " (CPU: not meaningful)"
            comp = f", {e.speedup_compile:.2f}x vs torch.compile" if e.speedup_compile else ""
            self._print(f"integration: outputs {'match' if e.correct else 'DIFFER'} (max err {e.max_abs_error:.3g}); "
                        f"{e.model_ms:.3f} ms vs eager {e.eager_ms:.3f} ms = {e.speedup_eager:.2f}x{comp}"
                        f"{compiled_headline(e)}{cpu}")
            self._print(f"   {e.detail}")
        elif isinstance(e, ev.ErrorEvent):
            self._print(f"!! {e.where}: {e.message}")
        elif isinstance(e, ev.Log) and e.level in ("warning", "error", "info"):
            self._print(f"   {e.message}")
        elif isinstance(e, ev.SessionDone):
            self._workers(e.ts)
            self._print(f"session {e.status}: {e.summary.get('experiments', 0)} experiments")

    def _decision(self, e: ev.Decision) -> None:
        c = self.cands.get(e.candidate_id)
        if c is None:
            return
        marks = {"pass": "+", "fail": "x", "crash": "!", "timeout": "T", "skipped": "-"}
        stages = "".join(marks.get(c["stages"].get(s, ("", ""))[0], ".") for s in STAGES)
        b = c["bench"]
        timing = "" if b is None else (f"{b.kernel_ms:9.4g} ms {b.speedup_eager:6.3g}x eager"
                                       + ("" if b.meaningful else " (cpu)") + (f" ({b.timing})" if b.timing else ""))
        if e.decision == "failed":
            timing = e.reason[:70]
        on = f" on {c['worker']}" if len(self.board) > 1 and c.get("worker") else ""
        self._print(f"#{c['n']:>4} {c['target']:<16} {c['idea'][:60]:<60} [{stages}] {timing}  {e.decision}"
                    + (" by user" if e.by == "user" else "") + on)


def resume_command(session_id: str, api_base: str | None = None) -> str:
    """How a stopped or left session goes on, as the TUI's exit line says it (with the server it asked)."""
    return f"resume with: autokernel optimize --headless --resume {session_id}" + (
        f" --api-base {api_base}" if api_base else "")


def _prompt_loop(session, finished: threading.Event, out: TextIO) -> None:
    """Answer approvals from the terminal while the session thread runs (until `finished` is set)."""
    asked = None
    while not finished.is_set():
        pending = session.pending_approval
        if pending and pending["candidate_id"] != asked:
            asked = pending["candidate_id"]
            while True:
                answer = input(f"approve {asked} ({pending['target']}, {pending['speedup']:.2f}x faster)? [a]pprove/[r]eject: ")
                answer = answer.strip().lower()
                if answer in ("a", "approve", "y", "yes"):
                    session.approve(asked)
                    break
                if answer in ("r", "reject", "n", "no"):
                    session.reject(asked)
                    break
        finished.wait(0.2)


def _run_in_tui(args: argparse.Namespace) -> int:
    """Without --headless the same session runs under the screen (`autokernel-tui` with these flags)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("the screen needs a terminal; add --headless to run without one")
    argv = [args.model] if args.model else []
    for flag, value in (("--agent", args.agent), ("--device", args.device), ("--budget", args.budget),
                        ("--max-experiments", args.max_experiments), ("--max-cost", args.max_cost),
                        ("--approval", args.approval), ("--size", args.size), ("--db", args.db),
                        ("--resume", args.resume), ("--api-base", args.api_base), ("--ray", args.ray),
                        ("--workers", None if args.workers == "auto" else args.workers)):
        if value is not None:
            argv += [flag, str(value)]
    from autokernel.tui.app import main as tui_main

    return tui_main(argv)


def run(args: argparse.Namespace) -> int:
    from ..session import OptimizeSession, SessionConfig, resumed_approval

    use_timeout_flag(args)  # through the environment, so the TUI's session reads it too
    if not args.headless:
        return _run_in_tui(args)
    store = open_store(args)
    approval = args.approval or (resumed_approval(store, args.resume) if args.resume else "auto")
    if approval == "ask" and not sys.stdin.isatty():
        if not args.approval:
            raise UserError(f"session {args.resume} was left in approval ask, which needs a terminal to answer on "
                            "(stdin is not a tty); resume it with --approval auto")
        raise UserError("--approval ask needs a terminal to answer on (stdin is not a tty); use --approval auto")
    if args.max_experiments is not None and args.max_experiments <= 0:
        raise UserError("--max-experiments must be a positive number")
    if args.plateau <= 0:
        raise UserError("--plateau must be a positive number")
    if not 0 <= args.stop_at_ceiling <= 1:
        raise UserError("--stop-at-ceiling must be a fraction from 0 to 1 (0: never stop there)")
    check_workers(args, args.device)
    config = SessionConfig(
        model_path=str(resolve_model_path(args.model)) if args.model else None, device=args.device, agent=args.agent,
        approval=args.approval,
        max_experiments=args.max_experiments, budget_s=parse_duration(args.budget) if args.budget else None,
        max_cost_usd=args.max_cost, size=args.size, resume=args.resume, plateau=args.plateau,
        stop_at_ceiling=args.stop_at_ceiling or None,
        integrate=not args.no_integrate, api_base=args.api_base, backend=args.backend,
        workers=args.workers, ray=args.ray,
    )
    out = sys.stderr if args.json else sys.stdout
    session = OptimizeSession(config, store, listeners=[HeadlessPrinter(out)])
    job = BackgroundRun(session.run, "autokernel-session")

    def resume() -> str:  # the session id exists once the run has opened it
        return resume_command(session.session_id, args.api_base) if session.session_id else "--resume continues"

    ended = job.wait_stopping(session.stop, lambda: f"stopping after the current experiment; then {resume()} "
                                                    "(Ctrl-C again to leave now)",
                              watch=(lambda: _prompt_loop(session, job.finished, out)) if approval == "ask" else None)
    if ended == "left":
        print(f"left at once; {resume()}", file=sys.stderr)
        return 130
    interrupted = ended == "stopped"
    summary = job.result() or {}
    if args.json:
        print_json(summary)
    elif summary:
        per = summary.get("experiment_seconds") or {}
        pace = f" (median {per['median']:.3g} s per experiment)" if per.get("median") is not None else ""
        sid = summary.get("session_id")
        more = f"{resume_command(sid, args.api_base)}; " if summary.get("status") == "stopped" else ""
        if summary.get("model_vs_compile"):
            cpu = "" if (summary.get("integration") or {}).get("meaningful", True) else " (CPU: not meaningful)"
            more = f"the model {summary['model_vs_compile']:.2f}x torch.compile{cpu}; " + more
        print(f"session {sid}: {summary.get('status')}, {summary.get('experiments')} experiments"
              f"{pace}, {summary.get('elapsed_s')} s; {more}export with: autokernel export {sid} -o DIR", file=out)
    if interrupted or summary.get("status") == "stopped":
        return 130
    return 0 if summary.get("status") == "completed" else 1
