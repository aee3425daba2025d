"""A pool of workers: a round's experiments run on as many workers as there are, results folded back as they come.

An experiment is a generator on the engine thread (`search.TargetSearch`): it emits its events and yields a
`Call` (check or bench) whenever it needs its worker, and gets the answer sent back (or the error thrown in).
The pool gives each experiment one free worker for its whole life, runs its calls on a thread of that worker,
and advances it again on the engine thread when the answer arrives; stage progress comes back the same way.
So the engine thread stays the only one that emits events or writes the store, and with one worker every call
runs inline on the engine thread, event for event as a search without a pool.

The pool pulls the next experiment whenever a worker is free, so the search can propose its next round while
the last ones of a round still run. When it has nothing to start yet (its proposal is still running, or a
plateau waits for the experiments under way), it yields None: the pool pulls it again once a running
experiment has ended. With one worker nothing is running when it is pulled, so it never waits.

Timed work never shares a GPU: each worker owns one device (`CUDA_VISIBLE_DEVICES` set to it alone) and runs
one call at a time, and a candidate's bench times it, eager and torch.compile together in that call.
A worker whose call raises `WorkerLost` (a Ray actor or its node gone) is dropped and logged, and that call
runs again on another worker; a worker process that merely died (a crashing candidate) restarts by itself.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterator

from .errors import UserError
from .worker import WorkerLost

RAY_INSTALL = "pip install 'autokernel-tui[ray]'"


@dataclass
class Call:
    """What an experiment asks of its worker: `getattr(worker, method)(*args, **kwargs)`."""

    method: str  # check | bench
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


Experiment = Generator[Call, Any, None]


@dataclass
class _Job:
    gen: Experiment
    worker: Any
    call: Call | None = None


def label_of(worker: Any) -> str:
    """What the store and the screens call a worker ("" for a double without a label)."""
    return str(getattr(worker, "label", "") or "")


def device_of(worker: Any) -> str:
    """The device a worker owns: "cuda:3" for the host's GPU 3, "cpu"."""
    return str(getattr(worker, "device_id", "") or getattr(worker, "device", "") or "")


class WorkerPool:
    """Worker-like objects (`check`, `bench`, `close`, `device`, `label`) running experiments (module doc)."""

    def __init__(self, workers: Any, log: Callable[[str], None] | None = None):
        """`workers`: one worker or a list; `log(line)` is called on the engine thread (a lost worker)."""
        self.workers = list(workers) if isinstance(workers, (list, tuple)) else [workers]
        if not self.workers:
            raise ValueError("a pool needs at least one worker")
        self.log = log or (lambda line: None)
        self.current: Any = self.workers[0]  # the worker of the experiment the engine thread is advancing
        self.inline = len(self.workers) == 1  # one worker: its calls run on the engine thread, as without a pool
        self._inbox: queue.Queue = queue.Queue()
        self._running: set[int] = set()

    @property
    def running(self) -> int:
        """How many experiments have started and not ended (as `starts` sees it when pulled)."""
        return len(self._running)

    def run(self, starts: Iterator[Experiment | None], hold: Callable[[], bool] = lambda: False) -> None:
        """Run the experiments `starts` yields, each on a free worker, until it is exhausted and every
        experiment has ended. `starts` is pulled only when a worker is free (it may wait out a pause, or
        stop by returning); `hold()` true keeps it unpulled while experiments are still running. A None
        from `starts` means nothing to start now: it is pulled again after the next running experiment
        ends (a None while none runs would wait forever, and is raised as `starts`'s error). An error
        raised by an experiment or by `starts` (StopLoop) is raised once the running ones have ended."""
        if not self.workers:
            raise WorkerLost("every worker of the pool was lost")
        free = deque(self.workers)
        running = self._running
        running.clear()
        displaced: deque[_Job] = deque()  # calls whose worker was lost, waiting for another
        error: BaseException | None = None
        more = True
        waiting = False  # `starts` has nothing to start until a running experiment ends

        def advance(job: _Job, value: Any = None, thrown: BaseException | None = None) -> None:
            nonlocal error, waiting
            self.current = job.worker
            try:
                job.call = job.gen.throw(thrown) if thrown is not None else job.gen.send(value)
            except StopIteration:
                job.call = None
            except BaseException as e:  # StopLoop, or the search's own bug: the others end first
                job.call = None
                error = error or e
            if job.call is None:
                running.discard(id(job))
                waiting = False
                if job.worker in self.workers:
                    free.append(job.worker)
                if not running:  # idle: the workers go out in their order again, as at the start of a run
                    ordered = sorted(free, key=self.workers.index)
                    free.clear()
                    free.extend(ordered)
            else:
                self._submit(job)

        while True:
            while displaced and free:
                job = displaced.popleft()
                job.worker = free.popleft()
                self._submit(job)
            while more and free and not displaced and not waiting and error is None and not (running and hold()):
                try:
                    gen = next(starts)
                    if gen is None and not running:
                        raise RuntimeError("the search waits for an experiment to end while none is running")
                except StopIteration:
                    more = False
                    break
                except BaseException as e:
                    error, more = e, False
                    break
                if gen is None:
                    waiting = True
                    break
                job = _Job(gen, free.popleft())
                running.add(id(job))
                advance(job)
            if not running:
                break
            if not self.workers and not free:  # nothing left to run the displaced calls on
                for job in displaced:
                    job.gen.close()
                    running.discard(id(job))
                displaced.clear()
                error = error or WorkerLost("every worker of the pool was lost")
                if not running:
                    break
            try:
                msg = self._inbox.get(timeout=0.25)
            except queue.Empty:
                continue
            if msg[0] == "stage":
                _, job, on_stage, args = msg
                self.current = job.worker
                try:
                    on_stage(*args)
                except BaseException as e:
                    error = error or e
                continue
            _, job, value, thrown = msg
            if isinstance(thrown, WorkerLost):
                self._drop(job, thrown)
                displaced.append(job)
                continue
            advance(job, value, thrown)
        if error is not None:
            raise error

    def _drop(self, job: _Job, why: BaseException) -> None:
        """A lost worker leaves the pool; its call waits for another."""
        lost = job.worker
        if lost in self.workers:
            self.workers.remove(lost)
        try:
            lost.close()
        except Exception:
            pass
        left = ", ".join(label_of(w) or "?" for w in self.workers) or "none"
        self.log(f"worker {label_of(lost) or '?'} ({device_of(lost)}) lost: {why}; its {job.call.method} "
                 f"runs again on another worker (left: {left})")

    def _submit(self, job: _Job) -> None:
        if self.inline:
            self._execute(job)
            return
        # A daemon thread per call: a second Ctrl-C leaves at once rather than wait for a check to end.
        threading.Thread(target=self._execute, args=(job,), name=f"autokernel-pool-{label_of(job.worker)}",
                         daemon=True).start()

    def _execute(self, job: _Job) -> None:
        """The call on its worker (a pool thread, or inline); the answer goes to the engine thread's inbox."""
        call = job.call
        kwargs = dict(call.kwargs)
        on_stage = kwargs.get("on_stage")
        if on_stage is not None and not self.inline:  # progress is emitted by the engine thread, in order
            kwargs["on_stage"] = lambda *a: self._inbox.put(("stage", job, on_stage, a))
        try:
            value = getattr(job.worker, call.method)(*call.args, **kwargs)
        except BaseException as e:
            self._inbox.put(("done", job, None, e))
            return
        self._inbox.put(("done", job, value, None))

    def close(self) -> None:
        for w in self.workers:
            try:
                w.close()
            except Exception:
                pass


# -- making the workers ------------------------------------------------------------------------------
def visible_gpus() -> list[str]:
    """The host's GPUs this process may use (indices as CUDA_VISIBLE_DEVICES names them)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and not d.strip().startswith("-")]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def worker_count(value: str | int | None, device: str) -> int:
    """`--workers N|auto` as a number: auto is one per visible GPU, and 1 on the CPU (where more interpreter
    workers must be asked for). More workers than GPUs is refused: timed work never shares a GPU."""
    text = "auto" if value is None else str(value).strip().lower()
    if text == "auto":
        return max(1, len(visible_gpus())) if device == "cuda" else 1
    try:
        n = int(text)
    except ValueError:
        raise UserError(f"--workers must be a positive number or auto, not {value!r}") from None
    if n <= 0:
        raise UserError(f"--workers must be a positive number or auto, not {value!r}")
    if device == "cuda":
        gpus = visible_gpus()
        if n > max(1, len(gpus)):
            raise UserError(f"--workers {n} needs {n} GPUs and this machine shows {len(gpus)}: a timing must have "
                            "its GPU to itself")
    return n


def make_workers(device: str, workers: str | int | None = None, ray: str | None = None) -> list:
    """The pool's workers: Ray actors at `ray` (an address, auto or local), or worker processes here, one per
    GPU (each sees only its own) or N interpreter workers on the CPU. One local worker is made as always."""
    if ray:
        return ray_pool(ray, device, None if workers in (None, "auto") else worker_count(workers, "cpu"))
    n = worker_count(workers, device)
    from .worker import Worker

    if device == "cuda":
        if n == 1:
            return [Worker(device="cuda")]
        made = [Worker(device="cuda", visible_device=g, label=f"gpu{g}") for g in visible_gpus()[:n]]
    else:
        made = [Worker(device=device)] if n == 1 else [Worker(device=device, label=f"{device}{i}") for i in range(n)]
    if len(made) > 1:  # up side by side now, not one by one as the first experiments reach them
        for w in made:
            w.start_soon()
    return made


def ray_pool(address: str, device: str, count: int | None) -> list:
    """Ray actors as the pool's workers (`autokernel.engine.ray_workers`, installed with the `ray` extra)."""
    try:
        from autokernel.engine.ray_workers import ray_workers
    except ImportError as e:
        raise UserError(f"--ray needs Ray ({e}): {RAY_INSTALL}") from None
    workers = list(ray_workers(address, device, count))
    if not workers:
        raise UserError(f"Ray at {address} gave no worker for {device}")
    return workers
