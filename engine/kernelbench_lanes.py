"""Problems side by side: a KernelBench batch asked for N workers runs N problems at once, one GPU each.

A KernelBench problem has one to three targets, so one session rarely keeps several GPUs busy; N problems
at once do. `LaneBatch` is the batch (engine/kernelbench.py) with N lanes: each lane is a thread that takes
the next unfinished problem and hands it to a child process of its own (`python -m
autokernel.engine.kernelbench_lanes`) that sees exactly one GPU (`CUDA_VISIBLE_DEVICES`) and runs that
problem's optimize session with one worker, through the very code of the in-process batch (`run_problem`),
into the same store (SQLite in WAL mode takes several writers). The child stays up for the lane's next
problem, as the in-process batch's own process does, so that each problem does not pay a fresh process's
imports, CUDA start and cold caches again; a child that dies is replaced for the next one. On the CPU a lane
is an interpreter process.

The parent sends one JSON request a line on the child's stdin, and closes it when the lane has no more; the
child says, one JSON object a line on its stdout, that it is ready (its SIGTERM handler is in place), which
session its problem got (as soon as it exists) and the problem's row at the end; anything else it prints
goes to stderr. The parent alone writes the batch's own events and calls its callbacks. A child that ends
without a row (killed, crashed) leaves its problem `error`, with the exit code and how to resume. Stopping
the batch sends each child SIGTERM, which stops its session cleanly (resumable); a child whose parent is
gone (its stdin closes) while a problem runs leaves at once, as the batch's own process did.
"""

from __future__ import annotations

import json
import os
import queue
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
CLOSE_TIMEOUT_S = 60  # how long a closed child may take to leave before it is killed


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

    def close(self) -> None:
        """Tell it the lane has no more problems (its stdin closes) and wait for it to end."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # idle children leave at once; this one is stuck
            self.proc.kill()
            self.proc.wait()


class LaneBatch(KernelBenchBatch):
    """A batch whose problems run `config.lanes` at a time, each lane with a child process (module doc). It has
    no live controls (pause, approve, ...): those steer one session in this process, which the TUI's batch is.
    `listeners` and `session_factory` do not reach the children."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self._children: dict[int, _Child] = {}  # by lane
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
        lanes = [threading.Thread(target=self._lane, args=(k, gpu, pending, failures),
                                  name=f"kernelbench-lane-{k}", daemon=True)
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

    def _lane(self, k: int, gpu: str | None, pending: deque, failures: list[BaseException]) -> None:
        try:
            while (i := self._next(pending)) is not None:
                self._started(i)
                finished = self.finished_before(i)
                self._record(i, finished if finished is not None else self._in_child(k, i, gpu))
        except BaseException as e:  # the batch's own failure: the other lanes end their problems first
            failures.append(e)
            self.stop()
        finally:
            self._retire(k)

    def _retire(self, k: int) -> None:
        """Lane `k`'s child, if it has one, closed and gone."""
        with self._children_lock:
            child = self._children.pop(k, None)
        if child is not None:
            child.close()

    def _child(self, k: int, gpu: str | None) -> _Child:
        """Lane `k`'s child, started if it has none (its own session: Ctrl-C in the terminal reaches the
        batch, which stops the children itself)."""
        with self._children_lock:
            child = self._children.get(k)
        if child is not None and child.proc.poll() is None:
            return child
        if child is not None:  # it died between problems: its next problem gets a new one
            self._retire(k)
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        proc = subprocess.Popen(CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                start_new_session=True)
        child = _Child(proc)
        with self._children_lock:
            self._children[k] = child
        return child

    def _in_child(self, k: int, i: int, gpu: str | None) -> ProblemResult:
        """Problem `i` run by lane `k`'s child, which sees `gpu` only: its row, or `error` if the child died
        without one (the lane's next problem then gets a new child)."""
        problem, t0 = self.problems[i], time.monotonic()
        request = {"db": str(self.store.path), "name": problem.name, "path": str(problem.path),
                   "resume": self.sessions.get(i),
                   "config": asdict(replace(self.config, workers=1, ray=None, lanes=1))}
        try:
            child = self._child(k, gpu)
        except OSError as e:
            return ProblemResult(name=problem.name, path=str(problem.path), status="error",
                                 reason=f"its process did not start: {e}", session_id=self.sessions.get(i),
                                 meaningful=self.config.device == "cuda")
        try:
            child.proc.stdin.write(json.dumps(request) + "\n")
            child.proc.stdin.flush()
        except OSError:  # it is gone already: it ends without a row, as below
            pass
        result = self._read(i, child)
        if result is not None:
            return result
        self._retire(k)
        return ProblemResult(name=problem.name, path=str(problem.path), status="error",
                             reason=lost_reason(child.proc.wait(), self.sessions.get(i), problem),
                             session_id=self.sessions.get(i), seconds=round(time.monotonic() - t0, 1),
                             meaningful=self.config.device == "cuda")

    def _read(self, i: int, child: _Child) -> ProblemResult | None:
        """What the child says about problem `i`: its session linked at once, its row returned; None if the
        child ends first."""
        while line := child.proc.stdout.readline():
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
                return ProblemResult.from_json(said["result"])
        return None


# -- the child ------------------------------------------------------------------------------------
def _claim_stdout() -> TextIO:
    """The child's stdout for its messages alone: what anything else writes there (Python or native code)
    goes to stderr."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


class _Requests:
    """The parent's requests, read from stdin by a thread of their own: one problem each, then None once the
    parent closed stdin (the lane has no more; it never closes it while a problem is under way). Stdin closing
    while a problem runs, or before it begins, means the parent is gone: nobody reads that problem's row any
    more, so the child leaves at once."""

    def __init__(self, stdin: TextIO):
        self._queue: queue.Queue[dict | None] = queue.Queue()
        self._lock = threading.Lock()
        self._running = self._closed = False
        threading.Thread(target=self._read, args=(stdin,), name="kernelbench-lane-parent", daemon=True).start()

    def _read(self, stdin: TextIO) -> None:
        for line in stdin:
            if line.strip():
                self._queue.put(json.loads(line))
        with self._lock:
            self._closed = True
            if self._running:
                os._exit(ORPHANED)
        self._queue.put(None)

    def next(self) -> dict | None:
        """The next request (waiting for it), None when there are no more; the child runs it until it asks
        again."""
        with self._lock:
            self._running = False
        request = self._queue.get()
        with self._lock:
            if request is not None and self._closed:
                os._exit(ORPHANED)
            self._running = request is not None
        return request


def child_main(session_factory: Any = None) -> int:
    """Run each problem the parent sends on stdin until it closes it (module doc); `session_factory(config,
    store, listeners)` replaces OptimizeSession (tests)."""
    out = _claim_stdout()
    said = threading.Lock()
    stopping = threading.Event()
    held: dict[str, Any] = {"session": None, "announced": None}

    def say(message: dict) -> None:
        with said:
            out.write(json.dumps(message, default=str) + "\n")

    def stop(signum: int, frame: Any) -> None:
        stopping.set()  # the problem under way stops, and any sent after it stops at once (resumable)
        session = held["session"]
        if session is not None:
            session.stop()

    signal.signal(signal.SIGTERM, stop)
    say({"ready": True})
    requests = _Requests(sys.stdin)

    from .store import Store

    while (request := requests.next()) is not None:
        problem = Problem(request["name"], Path(request["path"]))
        config = BatchConfig(**request["config"])
        store = Store(request["db"])
        held["announced"] = None

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
