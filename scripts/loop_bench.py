"""The optimize loop's own cost per experiment (a benchmark script, not a test).

    python3 scripts/loop_bench.py [--experiments 200]

The loop runs against the test doubles (tests/loop_doubles.py): a harness and an agent that take no
time, so what is timed is the loop itself: events written to SQLite, candidate files, diffs, the search
state. Prints seconds per experiment; the numbers, with the machine, go to docs/results/cpu.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from loop_doubles import EndlessAgent, FakeWorker, fake_profiler, install_fake_specs  # noqa: E402

from autokernel.engine.session import OptimizeSession, SessionConfig  # noqa: E402
from autokernel.engine.store import Store  # noqa: E402


def one_run(experiments: int) -> float:
    """Seconds per experiment of one session of `experiments` instant experiments."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        tmp_path = Path(tmp)
        mp.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path / "cache"))
        install_fake_specs(mp, tmp_path)
        model = tmp_path / "model.py"
        model.write_text("# the fake profiler never reads this\n")
        config = SessionConfig(model_path=str(model), device="cpu", integrate=False, max_experiments=experiments,
                               plateau=10 * experiments)
        session = OptimizeSession(config, Store(tmp_path / "sessions.db"), agent=EndlessAgent(),
                                  worker=FakeWorker(), profiler=fake_profiler())
        t0 = time.perf_counter()
        summary = session.run()
        return (time.perf_counter() - t0) / summary["experiments"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--experiments", type=int, default=200)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    per = [one_run(args.experiments) for _ in range(args.runs)]
    print(f"loop cost per experiment ({args.experiments} experiments, {args.runs} runs): "
          f"median {1000 * statistics.median(per):.1f} ms, min {1000 * min(per):.1f} ms, max {1000 * max(per):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
