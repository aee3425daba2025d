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
    start-up left out), and the workers that ran them; also what scripts/multigpu_bench.py reports."""
    from autokernel.engine import events as ev

    written = [e.ts for e in events if isinstance(e, ev.CandidateWritten)]
    decided = [e for e in events if isinstance(e, ev.Decision)]
    span = max(e.ts for e in decided) - min(written)
    return {"experiments": len(decided), "span_s": span, "per_hour": len(decided) * 3600.0 / span if span > 0 else None,
            "workers": sorted({e.worker for e in events if isinstance(e, ev.StageResult) and e.worker})}


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
                  f"per hour (workers {', '.join(r['workers'])})", flush=True)
    rates = {n: statistics.median(v) for n, v in runs.items()}
    base = rates.get("1")
    if base:
        for n, rate in rates.items():
            if n != "1":
                print(f"--workers {n} against --workers 1: {rate / base:.2f}x the experiments per hour")
    return 0


if __name__ == "__main__":
    sys.exit(main())
