"""What a Ray actor adds to a check: the same candidates through a local Worker and a RayWorker on a local
Ray cluster, each after a warm-up call, median seconds per check (CPU, Triton's interpreter). Both run at
once on the same cores. A one-CPU Ray actor runs with OMP_NUM_THREADS=1 (Ray sets it; its worker inherits
it), so where the stages themselves take seconds the two differ by torch's threads, not by Ray; the round
trip (candidate text out, stage events back) is what the check that fails at load shows.

    python3 scripts/ray_overhead.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = {"fails at load": ROOT / "tests" / "bad_candidates" / "no_kernel_fn.py",
              "softmax starter": ROOT / "kernels" / "softmax" / "starter_triton.py"}


def _medians(workers: list, path: Path, repeats: int) -> list[float]:
    """Median seconds per check for each worker, the workers taking turns so that a busy moment of a
    shared machine falls on both alike."""
    for w in workers:
        w.check(str(path), kernel="softmax")  # warm: the worker process started, Triton imported
    times: list[list[float]] = [[] for _ in workers]
    for _ in range(repeats):
        for w, out in zip(workers, times):
            t0 = time.perf_counter()
            w.check(str(path), kernel="softmax")
            out.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from autokernel.engine.ray_workers import ray_workers
    from autokernel.engine.worker import Worker

    t0 = time.perf_counter()
    (remote,) = ray_workers("local", "cpu", count=1)
    started = time.perf_counter() - t0
    print(f"local Ray cluster and one actor ready: {started:.1f} s")
    with Worker(device="cpu") as local:
        for name, path in CANDIDATES.items():
            here, there = _medians([local, remote], path, args.repeats)
            print(f"{name}: local Worker {here:.3f} s, RayWorker {there:.3f} s per check "
                  f"(median of {args.repeats}, taking turns)")
    remote.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
