"""Problems side by side: a KernelBench batch asked for N workers runs N problems at once, one GPU each.

A KernelBench problem has one to three targets, so one session rarely keeps several GPUs busy; N problems
at once do. `LaneBatch` is the batch (engine/kernelbench.py) with N lanes: each lane is a thread that takes
the next unfinished problem and runs it in a child process of its own (`python -m
autokernel.engine.kernelbench_lanes`) that sees exactly one GPU (`CUDA_VISIBLE_DEVICES`) and runs that
problem's optimize session with one worker, through the very code of the in-process batch (`run_problem`),
into the same store (SQLite in WAL mode takes several writers). On the CPU a lane is an interpreter process.

The child says, one JSON object a line on its stdout, that it is ready (its SIGTERM handler is in place),
which session its problem got (as soon as it exists) and the problem's row at the end; anything else it
prints goes to stderr. The parent alone writes the batch's own events and calls its callbacks. A child that
ends without a row (killed, crashed) leaves its problem `error`, with the exit code and how to resume.
Stopping the batch sends each child SIGTERM, which stops its session cleanly (resumable); a child whose
parent is gone (its stdin closes) leaves at once, as the batch's own process did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, TextIO

from .kernelbench import BatchConfig, KernelBenchBatch, Problem, ProblemResult, run_problem, session_config

CHILD = (sys.executable, "-m", "autokernel.engine.kernelbench_lanes")  # how a lane starts its child
ORPHANED = 3  # a child's exit code when its parent went away


def lane_count(workers: str | int | None, ray: str | None, device: str) -> int:
    """How many problems a batch runs at once: one per worker asked for (`--workers N|auto`), one with Ray
    (its workers are the session's pool, not lanes)."""
    from .pool import worker_count

    return 1 if ray else worker_count(workers, device)


def batch_class(config: BatchConfig) -> type[KernelBenchBatch]:
    """The batch that runs `config`: side by side for several lanes, else in this process."""
    return LaneBatch if config.lanes > 1 else KernelBenchBatch


def lane_gpus(config: BatchConfig) -> list[str | None]:
    """The GPU each lane owns (as CUDA_VISIBLE_DEVICES names it); None on the CPU."""
    if config.device != "cuda":
        return [None] * config.lanes
    from .pool import visible_gpus

    return list(visible_gpus()[:config.lanes]) or [None]


def lost_reason(code: int, session_id: str | None, problem: Problem) -> str:
    """One line for a child that ended without its problem's row: how it ended, and how to go on."""
    how = f"exit code {code}"
    if code < 0:
        try:
            how += f", {signal.Signals(-code).name}"
        except ValueError:
            pass
    if session_id:
        return (f"its process ended without a result ({how}); resume its session with: "
                f"autokernel optimize --headless --resume {session_id}")
    return f"its process ended without a result ({how}); run it again with: autokernel kernelbench {problem.path}"


class _Child:
    """One lane's child process and what the parent knows of it."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.ready = False  # its SIGTERM handler is in place

    def terminate(self) -> None:
        try:
            self.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass


class LaneBatch(KernelBenchBatch):
    """A batch whose problems run `config.lanes` at a time, each in a child process (module doc). It has no
    live controls (pause, approve, ...): those steer one session in this process, which the TUI's batch is.
    `listeners` and `session_factory` do not reach the children."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self._children: dict[int, _Child] = {}
        self._children_lock = threading.Lock()

    @property
    def lanes(self) -> int:
        return self.config.lanes

    def stop(self) -> None:
        super().stop()
        with self._children_lock:
            for child in self._children.values():
                if child.ready:  # a child not ready yet gets SIGTERM when it says it is (_read)
                    child.terminate()

    def _run_problems(self) -> None:
        """Each lane, a thread with its GPU, takes the next unfinished problem until none is left or the batch
        stops; the first failure of the batch's own code is raised once every lane has ended."""
        pending = deque(i for i in range(len(self.problems)) if i not in self.rows)
        failures: list[BaseException] = []
        lanes = [threading.Thread(target=self._lane, args=(gpu, pending, failures), name=f"kernelbench-lane-{k}",
                                  daemon=True)
                 for k, gpu in enumerate(lane_gpus(self.config)[:max(1, len(pending))])]
        for lane in lanes:
            lane.start()
        for lane in lanes:
            lane.join()
        if failures:
            raise failures[0]

    def _next(self, pending: deque) -> int | None:
        with self._children_lock:
            return None if self.stopped or not pending else pending.popleft()

    def _lane(self, gpu: str | None, pending: deque, failures: list[BaseException]) -> None:
        try:
            while (i := self._next(pending)) is not None:
                self._started(i)
                finished = self.finished_before(i)
                self._record(i, finished if finished is not None else self._in_child(i, gpu))
        except BaseException as e:  # the batch's own failure: the other lanes end their problems first
            failures.append(e)
            self.stop()

    def _in_child(self, i: int, gpu: str | None) -> ProblemResult:
        """Problem `i` run by a child process that sees `gpu` only: its row, or `error` if it died without one."""
        problem, t0 = self.problems[i], time.monotonic()
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        request = {"db": str(self.store.path), "name": problem.name, "path": str(problem.path),
                   "resume": self.sessions.get(i),
                   "config": asdict(replace(self.config, workers=1, ray=None, lanes=1))}
        try:
            # its own session: Ctrl-C in the terminal reaches the batch, which stops the children itself
            proc = subprocess.Popen(CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                    start_new_session=True)
        except OSError as e:
            return ProblemResult(name=problem.name, path=str(problem.path), status="error",
                                 reason=f"its process did not start: {e}", session_id=self.sessions.get(i),
                                 meaningful=self.config.device == "cuda")
        child = _Child(proc)
        with self._children_lock:
            self._children[i] = child
        try:
            try:
                proc.stdin.write(json.dumps(request) + "\n")  # the pipe stays open: the child's lifeline
                proc.stdin.flush()
            except OSError:  # it is gone already: it ends without a row, as below
                pass
            result = self._read(i, child)
            code = proc.wait()
        finally:
            with self._children_lock:
                self._children.pop(i, None)
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        if result is not None:
            return result
        return ProblemResult(name=problem.name, path=str(problem.path), status="error",
                             reason=lost_reason(code, self.sessions.get(i), problem),
                             session_id=self.sessions.get(i), seconds=round(time.monotonic() - t0, 1),
                             meaningful=self.config.device == "cuda")

    def _read(self, i: int, child: _Child) -> ProblemResult | None:
        """What the child says, until it ends: its session linked at once, its row returned."""
        result = None
        for line in child.proc.stdout:
            try:
                said = json.loads(line)
            except ValueError:
                continue
            if said.get("ready"):
                with self._children_lock:
                    child.ready = True
                    if self.stopped:
                        child.terminate()
            elif said.get("session"):
                self._link(i, said["session"])
            elif said.get("result"):
                result = ProblemResult.from_json(said["result"])
        return result


# -- the child ------------------------------------------------------------------------------------
def _claim_stdout() -> TextIO:
    """The child's stdout for its messages alone: what anything else writes there (Python or native code)
    goes to stderr."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


def _leave_with_parent(stdin: TextIO) -> None:
    """Leave at once when the parent's end of stdin closes: nobody reads this problem's row any more."""
    def watch() -> None:
        stdin.read()
        os._exit(ORPHANED)

    threading.Thread(target=watch, name="kernelbench-lane-parent", daemon=True).start()


def child_main(session_factory: Any = None) -> int:
    """Run the one problem the parent sends on stdin (module doc); `session_factory(config, store,
    listeners)` replaces OptimizeSession (tests)."""
    out = _claim_stdout()
    said = threading.Lock()
    stopping = threading.Event()
    held: dict[str, Any] = {"session": None, "announced": None}

    def say(message: dict) -> None:
        with said:
            out.write(json.dumps(message, default=str) + "\n")

    def stop(signum: int, frame: Any) -> None:
        stopping.set()
        session = held["session"]
        if session is not None:
            session.stop()

    signal.signal(signal.SIGTERM, stop)
    say({"ready": True})
    request = json.loads(sys.stdin.readline())
    _leave_with_parent(sys.stdin)

    from .store import Store

    problem = Problem(request["name"], Path(request["path"]))
    config = BatchConfig(**request["config"])
    store = Store(request["db"])

    def announce(event: Any) -> None:
        sid = getattr(held["session"], "session_id", None)
        if sid and held["announced"] != sid:
            held["announced"] = sid
            say({"session": sid})

    def make_session() -> Any:
        listeners = [announce]
        if config.verbose:
            from .commands.optimize import HeadlessPrinter

            listeners.append(HeadlessPrinter(sys.stderr))
        cfg = session_config(problem, config, request.get("resume"))
        if session_factory is not None:
            return session_factory(cfg, store, listeners)
        from .session import OptimizeSession

        return OptimizeSession(cfg, store, listeners=listeners)

    def hold(session: Any) -> None:
        held["session"] = session
        if session is not None and stopping.is_set():  # stopped before it existed: it stops at its first checkpoint
            session.stop()

    result = run_problem(problem, config, make_session, hold)
    say({"result": result.to_json()})
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
