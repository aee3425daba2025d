"""The Inductor seeds of a batch's next problems, made ahead in the background while a problem runs.

A problem's session spends ~25 s on an H100 box waiting for Inductor's code generation (a CPU job in a
subprocess) before its first experiment. Beside a GPU the CPU is mostly idle meanwhile, so the batch asks for
the seeds of the problems it will start next as each problem starts; they land in the seed cache
(engine/seeding.py), where the next session finds its seed ready, or waits on the key's lock for the one under
way instead of making it twice. On a CPU-only run the seeds would take the cores the problem under way runs on,
so the batch asks for none there unless told to.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
from pathlib import Path

from .seeding import seed_problem


class SeedPrefetch:
    """Seeds made ahead, each problem at most once; `close()` ends those still being made."""

    def __init__(self, size: str):
        self.size = size
        self._asked: set[Path] = set()
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._closed = False

    def ask(self, problems: list[Path]) -> None:
        """Start making the seeds of `problems` not asked for before, each on a thread of its own."""
        fresh = []
        with self._lock:
            for problem in map(Path, problems):
                if problem not in self._asked and not self._closed:
                    self._asked.add(problem)
                    fresh.append(problem)
        for problem in fresh:
            threading.Thread(target=self._make, args=(problem,), name=f"autokernel-seed-{problem.stem}",
                             daemon=True).start()

    def _make(self, problem: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="autokernel-seed-ahead-") as tmp:
            seed_problem(problem, Path(tmp) / "seed.py", self.size, on_spawn=self._spawned)

    def _spawned(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.append(proc)
            if self._closed:  # the batch ended while this one was starting
                proc.kill()

    def close(self) -> None:
        """The batch has ended: no seed is needed any more, those under way are ended."""
        with self._lock:
            self._closed = True
            procs, self._procs = self._procs, []
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
