"""Experiments per hour with a pool of workers against one, on the same CPU session (a benchmark, not a test).

    python3 scripts/pool_bench.py [--experiments 9] [--workers 1,2] [--runs 1]

Each run is `autokernel optimize --headless --device cpu --no-integrate` on a small softmax model (the real
profiler, playbook agent and worker processes under Triton's interpreter), with a fresh database and
cache. The rate counts decided experiments over the span from the first experiment written to the last
decided (profiling and worker start-up before it are left out; a worker started for the first round is
in). The numbers, with the machine, go to docs/results/cpu.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TINY = Path(__file__).resolve().parents[1] / "tests" / "data" / "tiny_softmax.py"


def one_run(workers: str, experiments: int) -> dict:
    """One session; its rate of experiments and what it ran them on, read back from its store."""
    from autokernel.engine.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
        cmd = [sys.executable, "-m", "autokernel.engine.cli", "optimize", str(TINY), "--headless",
               "--device", "cpu", "--no-integrate", "--plateau", str(10 * experiments),
               "--max-experiments", str(experiments), "--workers", workers, "--db", str(tmp_path / "s.db")]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"pool_bench: `{' '.join(cmd)}` failed ({done.returncode}): {done.stderr[-500:]}")
        store = Store(tmp_path / "s.db")
        (row,) = store.sessions()
        events = list(store.iter_events(row["id"]))
    return session_rate(events)


def session_rate(events: list) -> dict:
    """Decided experiments over the span from the first experiment written to the last decided (profiling and
    start-up left out), the workers that ran them and how busy each was; also what scripts/multigpu_bench.py
    reports."""
    from autokernel.engine import events as ev

    written = [e.ts for e in events if isinstance(e, ev.CandidateWritten)]
    decided = [e for e in events if isinstance(e, ev.Decision)]
    start, end = min(written), max(e.ts for e in decided)
    span = end - start
    return {"experiments": len(decided), "span_s": span, "per_hour": len(decided) * 3600.0 / span if span > 0 else None,
            "workers": sorted({e.worker for e in events if isinstance(e, ev.StageResult) and e.worker}),
            "busy": busy_fractions(events, start, end)}


def busy_fractions(events: list, start: float, end: float) -> dict[str, float]:
    """Each worker's share of [start, end] spent on experiments: an experiment holds the worker of its stages
    from its first stage to its decision (a lost worker's share ends where another's stages begin)."""
    from autokernel.engine import events as ev

    stages: dict[str, list[tuple[float, str]]] = {}
    decided_at: dict[str, float] = {}
    for e in events:
        if isinstance(e, ev.StageResult) and e.worker:
            stages.setdefault(e.candidate_id, []).append((e.ts, e.worker))
        elif isinstance(e, ev.Decision):
            decided_at.setdefault(e.candidate_id, e.ts)
    held: dict[str, list[tuple[float, float]]] = {}
    for cid, seen in stages.items():
        seen.sort()
        turns = [(ts, w) for i, (ts, w) in enumerate(seen) if i == 0 or w != seen[i - 1][1]]  # where a worker took it
        ends = [ts for ts, _ in turns[1:]] + [decided_at.get(cid, end)]
        for (begin, worker), stop in zip(turns, ends):
            held.setdefault(worker, []).append((max(begin, start), min(stop, end)))
    span = end - start
    return {worker: _covered(spans) / span if span > 0 else 0.0 for worker, spans in sorted(held.items())}


def _covered(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of (begin, end) spans."""
    total, reach = 0.0, float("-inf")
    for begin, stop in sorted(spans):
        begin = max(begin, reach)
        if stop > begin:
            total += stop - begin
            reach = stop
    return total


def busy_line(busy: dict[str, float]) -> str:
    """`gpu0 93% busy, gpu1 71% busy`: how busy each worker was over the session's span."""
    return ", ".join(f"{worker} {fraction:.0%} busy" for worker, fraction in busy.items()) or "no worker named"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--experiments", type=int, default=9, help="experiments per session, the starter included")
    p.add_argument("--workers", default="1,2", help="the pool sizes to compare (comma-separated)")
    p.add_argument("--runs", type=int, default=1, help="sessions per pool size (the median is reported)")
    args = p.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    sizes = [n.strip() for n in args.workers.split(",")]
    runs: dict[str, list[float]] = {n: [] for n in sizes}
    for _ in range(args.runs):  # the sizes take turns, so a box whose load changes weighs on each alike
        for n in sizes:
            r = one_run(n, args.experiments)
            runs[n].append(r["per_hour"])
            print(f"--workers {n}: {r['experiments']} experiments in {r['span_s']:.1f} s = {r['per_hour']:.0f} "
                  f"per hour ({busy_line(r['busy'])})", flush=True)
    rates = {n: statistics.median(v) for n, v in runs.items()}
    base = rates.get("1")
    if base:
        for n, rate in rates.items():
            if n != "1":
                print(f"--workers {n} against --workers 1: {rate / base:.2f}x the experiments per hour")
    return 0


if __name__ == "__main__":
    sys.exit(main())
