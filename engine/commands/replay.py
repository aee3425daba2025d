"""`autokernel replay SESSION|latest`: a stored session's events step by step, without a screen.

The screenless counterpart of the TUI's replay screen: the same events, folded by the same reducer
(`engine/session_state.py`), printed one line per event (or one JSON object per line with --json),
then the final state: the bottleneck table and the best kernel of each target.
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import events as ev
from ..session_state import SessionState, describe, format_duration
from .common import add_db_flag, open_store

HELP = "print a stored session's events step by step (the TUI's replay, as text or JSON lines)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", default="latest", metavar="SESSION|latest",
                   help="a session id, a unique prefix of one, or latest (default)")
    add_db_flag(p)
    p.add_argument("--json", action="store_true", help="one JSON object per event (and a last one with the state)")
    p.add_argument("--to-experiment", type=int, default=None, metavar="N",
                   help="stop after experiment N has been decided")


def step_text(e: ev.Event) -> str:
    """What one event says, in a line: the log's words, or the stage/status for quiet events."""
    line = describe(e)
    if line is not None:
        return line[1]
    if isinstance(e, ev.StageResult):
        return f"{e.candidate_id} {e.stage}: {e.status}" + (f" ({e.seconds:.2f}s)" if e.seconds else "")
    return e.type


def state_json(s: SessionState) -> dict:
    """The reducer's view, as the screens show it (rows, current target, counters)."""
    return {
        "session_id": s.session_id, "status": s.status, "device": s.device, "device_name": s.device_name,
        "agent": s.agent, "approval": s.approval, "experiments": s.experiments, "decided": s.decided,
        "passed": s.passed, "failed": s.failed, "kept": s.kept, "cost_usd": s.cost_usd,
        "elapsed_s": round(s.elapsed_s, 3), "rate_per_hour": round(s.rate_per_hour(), 2),
        "current_target": s.current_target,
        "pending_approval": s.pending.candidate_id if s.pending else None,
        "rows": [{"kind": r.kind, "name": r.name, "share": r.share, "self_ms": r.self_ms, "floor_ms": r.floor_ms,
                  "now_ms": r.now_ms, "best_speedup": r.best_speedup, "e2e_now": r.e2e_now,
                  "max_speedup": r.max_speedup, "status": r.status} for r in s.rows],
        "targets": {name: {"best_candidate": t.best_id, "best_speedup": t.best_speedup, "best_ms": t.best_ms,
                           "fraction_of_ceiling": t.best_sol, "experiments": len(t.points), "done": t.done,
                           "meaningful": t.meaningful} for name, t in s.targets.items()},
    }


def _print_state(s: SessionState, out) -> None:
    print(f"\n{s.session_id}: {s.status}, {s.experiments} experiments ({s.passed} passed, {s.failed} failed, "
          f"{s.kept} kept) in {format_duration(s.elapsed_s)}, LLM ${s.cost_usd:.2f}", file=out)
    if s.rows:
        print(f"{'kind':<16}{'share':>7}{'now ms':>9}{'floor ms':>10}{'best':>8}{'e2e now':>9}{'bound':>8}  status",
              file=out)
        for r in s.rows:
            best = f"{r.best_speedup:.2f}x" if r.best_speedup else "-"
            floor = f"{r.floor_ms:.3g}" if r.floor_ms is not None else "-"
            print(f"{r.kind:<16}{100 * r.share:>6.1f}%{r.now_ms:>9.3g}{floor:>10}{best:>8}{r.e2e_now:>8.3f}x"
                  f"{r.max_speedup:>7.3f}x  {r.status}", file=out)
    for name, t in s.targets.items():
        if t.best_id:
            note = "" if t.meaningful else " (CPU: not meaningful)"
            print(f"best {name}: {t.best_id}, {t.best_speedup or 0:.2f}x vs eager, "
                  f"{100 * (t.best_sol or 0):.0f}% of speed of light{note}", file=out)


def run(args: argparse.Namespace) -> int:
    store = open_store(args)
    row = store.session(args.session)
    state = SessionState(row["id"])
    out = sys.stdout
    t0 = None
    for seq, e in store.events(row["id"]):
        state.apply(e)
        t0 = e.ts if t0 is None else t0
        if args.json:
            out.write(json.dumps({"seq": seq, "ts": e.ts, "type": e.type, "text": step_text(e),
                                  "event": e.payload()}, default=str) + "\n")
        else:
            out.write(f"{seq:>6} +{format_duration(e.ts - t0):>7}  {e.type:<18} {step_text(e)}\n")
        if args.to_experiment is not None and isinstance(e, ev.Decision) \
                and state.candidate is not None and state.candidate.experiment >= args.to_experiment:
            break
    if args.json:
        out.write(json.dumps({"type": "state", "state": state_json(state)}, default=str) + "\n")
    else:
        _print_state(state, out)
    return 0
