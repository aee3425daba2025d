"""What a stored session holds, in a few words, for the sessions list.

Every command that measures something (profile, bench, optimize, a KernelBench batch) records a session, so
the list mixes kinds; a user who ran `autokernel profile` three times sees three rows and should see at a
glance that those are profile tables (replayable, nothing to export), not searches.
"""

from __future__ import annotations

from typing import Any

KINDS = {
    "profile": "one `autokernel profile` run: its table (replay shows it again)",
    "optimize": "a kernel search (resume continues it, export writes its kept kernels)",
    "bench": "the starters timed by `autokernel bench`",
    "kernelbench": "a KernelBench batch (its problems are optimize sessions)",
}


def holds(row: dict[str, Any]) -> str:
    """A session row (as `Store.sessions()` returns it) -> what it holds, e.g. `profile: 12.3 ms per forward,
    top RMSNorm` or `14 experiments, kept rmsnorm 1.31x`."""
    kind, summary, status = row.get("kind"), row.get("summary") or {}, row.get("status")
    if kind == "profile":
        if summary.get("total_ms") is None:
            return "profile: no table (the run did not finish)"
        top = f", top {summary['top']}" if summary.get("top") else ""
        return f"profile: {summary['total_ms']:.4g} ms per forward{top}"
    if kind == "optimize":
        if "experiments" not in summary:
            return "search under way" if status == "running" else "search cut short (resume continues it)"
        kept = [f"{t['target']} {t['speedup_eager']:.2f}x" for t in summary.get("targets") or []
                if t.get("best_candidate") and t.get("speedup_eager")]
        return f"{summary['experiments']} experiments, " + (f"kept {', '.join(kept)}" if kept else "nothing kept")
    if kind == "bench":
        if "timed" not in summary:
            return "starter timings (cut short)"
        return f"starter timings: {summary['timed']} timed, {summary.get('failed', 0)} failed"
    if kind == "kernelbench":
        problems = summary.get("problems")
        if problems is None:
            return "KernelBench batch (cut short: kernelbench --resume continues it)"
        correct = sum(1 for p in problems if p.get("status") == "correct")
        return f"KernelBench batch: {correct} of {summary.get('total', len(problems))} problems correct"
    return ""
