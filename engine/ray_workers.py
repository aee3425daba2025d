"""Workers on a Ray cluster, for a session that spans more than one host.

Each Ray actor holds an ordinary `Worker` (so the five stages, the timeouts and crash handling are the
local ones) and `RayWorker` is the engine's handle on it, with the `Worker` interface the pool expects.
Only plain data crosses the wire: a candidate's text and name (the actor writes it to its own scratch
folder, since the engine's disk is not the node's) and the result dataclasses. Stage progress streams
back as it happens through a Ray streaming generator, so the engine stays the one writer of the store.
An actor or node that is gone raises `WorkerLost`, for the pool to run the experiment elsewhere.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import shutil
import signal
import socket
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .errors import UserError
from .results import BenchRecord, CheckReport
from .worker import StageCallback, Worker, WorkerLost

log = logging.getLogger("autokernel.engine.ray_workers")
log.addHandler(logging.NullHandler())  # a library logs; the app decides where

INSTALL_HINT = "pip install 'autokernel-tui[ray]'"
START_TIMEOUT_S = 180.0  # a node may have to start Python and import the package before an actor answers
CLOSE_TIMEOUT_S = 10.0  # an actor's own Worker.close() waits up to 5 s for a busy worker process


@dataclass(frozen=True)
class SourceFile:
    """A file's name and text: what a candidate (or a problem file) is once it leaves the engine's disk."""

    name: str
    text: str

    @classmethod
    def read(cls, path: str | os.PathLike) -> "SourceFile":
        p = Path(path)
        return cls(p.name, p.read_text())

    def place(self, root: Path) -> Path:
        """Write it under `root` in a folder named by its content, so a name reused with new text never
        meets the old file, and the same file sent twice lands on the same path."""
        digest = hashlib.sha256(f"{self.name}\0{self.text}".encode()).hexdigest()[:16]
        path = root / digest / self.name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(path.suffix + ".part")
            tmp.write_text(self.text)
            tmp.replace(path)
        return path


# -- what an actor sends back, one class each (Ray pickles them) ------------------------------------

@dataclass(frozen=True)
class StageProgress:
    """A stage started or ended on the actor: the `on_stage` call's arguments, replayed on the engine."""

    args: tuple


@dataclass(frozen=True)
class CheckDone:
    """The last item of a check: its report and how many worker processes the actor has restarted."""

    report: CheckReport
    restarts: int


@dataclass(frozen=True)
class BenchDone:
    """A timing's records, and the actor's restarts."""

    records: list[BenchRecord]
    restarts: int


@dataclass(frozen=True)
class BenchFailed:
    """The candidate crashed or timed out while timed (a local Worker.bench's RuntimeError), and the restarts."""

    why: str
    restarts: int


@dataclass(frozen=True)
class _Raised:
    """Inside the actor only: the check's thread raised; the generator raises it as the method's own error."""

    error: BaseException


class WorkerHost:
    """The body of a Ray actor: one local `Worker` and a scratch folder for the files sent to it."""

    def __init__(self, device: str, stage_timeout: float | None = None, load_timeout: float | None = None):
        self.worker = Worker(device=device, stage_timeout=stage_timeout, load_timeout=load_timeout)
        self.scratch = Path(tempfile.mkdtemp(prefix="autokernel-ray-"))

    def where(self) -> tuple[str, list[str]]:
        """The node's address and the GPUs Ray gave this actor (none on CPU)."""
        import ray

        return ray.util.get_node_ip_address(), [str(g) for g in ray.get_gpu_ids()]

    def _problem(self, problem: SourceFile | None) -> str | None:
        return str(problem.place(self.scratch)) if problem is not None else None

    def check(self, candidate: SourceFile, problem: SourceFile | None,
              args: dict) -> Iterator[StageProgress | CheckDone]:
        """Yields a StageProgress as the worker reports each stage, then the CheckDone. The worker runs in a
        thread so its callback can feed this generator."""
        path = str(candidate.place(self.scratch))
        events: queue.Queue = queue.Queue()

        def run() -> None:
            try:
                report = self.worker.check(path, on_stage=lambda *a: events.put(StageProgress(a)),
                                           problem=self._problem(problem), **args)
                events.put(CheckDone(report, self.worker.restarts))
            except BaseException as e:  # reaches the engine as the method's own error
                events.put(_Raised(e))

        threading.Thread(target=run, name="autokernel-ray-check", daemon=True).start()
        while True:
            msg = events.get()
            if isinstance(msg, _Raised):
                raise msg.error
            yield msg
            if isinstance(msg, CheckDone):
                return

    def bench(self, candidate: SourceFile, problem: SourceFile | None, args: dict) -> BenchDone | BenchFailed:
        """The records, or BenchFailed where a local Worker.bench raises RuntimeError."""
        path = str(candidate.place(self.scratch))
        try:
            return BenchDone(self.worker.bench(path, problem=self._problem(problem), **args), self.worker.restarts)
        except RuntimeError as e:
            return BenchFailed(str(e), self.worker.restarts)

    def close(self) -> None:
        self.worker.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class RayWorker:
    """The engine's handle on one `WorkerHost` actor: `check`, `bench`, `close`, `device`, `label`,
    as `Worker` has them; a lost actor raises `WorkerLost`."""

    def __init__(self, actor: Any, device: str, label: str, device_id: str | None = None):
        self._actor = actor
        self.device = device
        self.label = label
        self.device_id = device_id or device  # "cuda:1": the GPU Ray gave the actor, on the node the label names
        self.restarts = 0  # the actor's worker processes started after its first
        self.lost = ""  # why this worker can no longer be used, once it cannot
        self._busy = False

    def _source(self, path: str | os.PathLike | None) -> SourceFile | None:
        return SourceFile.read(path) if path is not None else None

    def _lose(self, doing: str, error: BaseException) -> WorkerLost:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        self.lost = self.lost or f"{type(error).__name__}: {first}"
        log.warning("%s lost while %s: %s", self.label, doing, self.lost)
        return WorkerLost(f"{self.label} lost while {doing}: {self.lost}")

    def _call(self, doing: str, run: Any) -> Any:
        """Run `run()` (which waits on the actor), turning a lost actor into WorkerLost and Ctrl-C into
        killing the actor, so remote work never outlives the engine's wish to stop."""
        from ray.exceptions import RayError, RayTaskError

        if self.lost:
            raise WorkerLost(f"{self.label} was lost earlier: {self.lost}")
        self._busy = True
        try:
            return run()
        except KeyboardInterrupt:
            self.kill("interrupted")
            raise
        except RayTaskError as e:  # the actor's method itself raised: not a lost worker
            raise e.as_instanceof_cause() from None
        except RayError as e:
            raise self._lose(doing, e) from None
        finally:
            self._busy = False

    def check(self, path: str, kernel: str, backend: str = "triton", on_stage: StageCallback | None = None,
              extra_shapes: list[dict] | None = None, problem: str | None = None,
              size: str | None = None, dtypes: list[str] | None = None) -> CheckReport:
        """`Worker.check` on the actor, with `on_stage` called here as each stage starts and ends there."""
        import ray

        notify = on_stage or (lambda *a: None)
        args = {"kernel": kernel, "backend": backend, "extra_shapes": extra_shapes, "size": size, "dtypes": dtypes}
        candidate, problem_file = self._source(path), self._source(problem)

        def run() -> tuple[CheckReport, int]:
            for ref in self._actor.check.remote(candidate, problem_file, args):
                match ray.get(ref):
                    case StageProgress(args=stage):
                        notify(*stage)
                    case CheckDone(report=report, restarts=restarts):
                        return report, restarts
                    case other:
                        raise WorkerLost(f"{self.label} sent an unexpected message during a check: {other!r:.200}")
            raise WorkerLost(f"{self.label} ended a check without a report")

        report, self.restarts = self._call(f"checking {candidate.name}", run)
        report.candidate = str(path)  # the engine's name for it, not the node's scratch copy
        return report

    def bench(self, path: str, kernel: str, shapes: list[dict], dtype: str, backend: str = "triton",
              with_compile: bool | None = None, problem: str | None = None,
              size: str | None = None) -> list[BenchRecord]:
        """`Worker.bench` on the actor: its records, or its RuntimeError when the candidate failed while timed."""
        import ray

        args = {"kernel": kernel, "shapes": shapes, "dtype": dtype, "backend": backend,
                "with_compile": with_compile, "size": size}
        candidate = self._source(path)
        ref = self._actor.bench.remote(candidate, self._source(problem), args)
        reply = self._call(f"timing {candidate.name}", lambda: ray.get(ref))
        self.restarts = reply.restarts
        if isinstance(reply, BenchFailed):
            raise RuntimeError(reply.why)
        return reply.records

    def kill(self, why: str = "closed") -> None:
        """End the actor now, and with it the work it runs (its worker process is its child)."""
        import ray

        self.lost = self.lost or why
        try:
            ray.kill(self._actor, no_restart=True)
        except Exception:  # already gone, or Ray itself shut down
            pass

    def close(self) -> None:
        """Let an idle actor close its worker and scratch folder, then end it; a busy one (the engine
        is stopping) is ended at once."""
        import ray

        if not self.lost and not self._busy:
            try:
                ray.get(self._actor.close.remote(), timeout=CLOSE_TIMEOUT_S)
            except Exception:  # busy, lost or Ray gone: killing it below is all that is left
                pass
        self.kill()

    def __enter__(self) -> "RayWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def _reachable(address: str) -> None:
    """A Ray address (host:port of the head's GCS) where nothing listens is refused here, in seconds:
    Ray itself keeps retrying for minutes. "auto", "local" and ray:// client addresses are left to Ray."""
    if address in ("auto", "local") or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"not a Ray address: {address!r} (auto, local, or host:port of the head node)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as e:
        raise UserError(f"could not join the Ray cluster at {address!r}: nothing answers there ({e.strerror or e})") from None


def connect(address: str, device: str, count: int | None = None) -> None:
    """Join the cluster at `address` ("auto": the one running here; "local": start one in this
    process; else a Ray address), unless this process is connected already."""
    ray = _import_ray()
    if ray.is_initialized():
        return
    # Neither the actors' output nor Ray's own warnings may reach the TUI's screen: Ray's loggers keep
    # their records for the app's handlers, and Ray's SIGTERM handler must not replace the engine's.
    quiet = {"log_to_driver": False, "configure_logging": False}
    _reachable(address)
    for name in ("ray", "ray._private"):
        logging.getLogger(name).addHandler(logging.NullHandler())
    on_term = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    try:
        if address == "local":
            cpus = count if device == "cpu" and count else os.cpu_count() or 1
            # address="local": a new cluster of its own, even where another runs here (None would join that one)
            ray.init(address="local", num_cpus=cpus, include_dashboard=False,
                     object_store_memory=200 * 1024 * 1024, **quiet)
        else:
            ray.init(address=address, **quiet)
    except Exception as e:  # ConnectionError, ValueError, RuntimeError: all mean "no cluster there"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"could not join the Ray cluster at {address!r}: {first}") from None
    finally:
        if on_term is not None:
            signal.signal(signal.SIGTERM, on_term)
        logging.getLogger("ray").addHandler(logging.NullHandler())  # ray.init cleared the one above


def ray_workers(address: str, device: str, count: int | None = None, start_timeout: float = START_TIMEOUT_S,
                stage_timeout: float | None = None, load_timeout: float | None = None) -> list[RayWorker]:
    """One `RayWorker` per GPU of the cluster (device "cuda", each actor holding one GPU), or `count`
    of them (default: one per CPU) holding a CPU each (device "cpu"); all started and placed on return."""
    if device not in ("cpu", "cuda"):
        raise UserError(f"unknown device {device!r} for Ray workers (cpu or cuda)")
    if count is not None and count < 1:
        raise UserError(f"--workers must be at least 1 (got {count})")
    connect(address, device, count)
    ray = _import_ray()
    resource = "GPU" if device == "cuda" else "CPU"
    have = int(ray.cluster_resources().get(resource, 0))
    if have < 1:
        raise UserError(f"the Ray cluster at {address!r} has no {resource}s" +
                        (": use --device cpu" if device == "cuda" else ""))
    count = count or have
    if count > have:
        raise UserError(f"{count} Ray workers asked for, but the cluster at {address!r} has {have} {resource}s")
    host = ray.remote(WorkerHost).options(num_gpus=1 if device == "cuda" else 0, num_cpus=0 if device == "cuda" else 1,
                                          max_concurrency=2, max_restarts=0)
    actors = [host.remote(device, stage_timeout, load_timeout) for _ in range(count)]
    pending = {a.where.remote(): i for i, a in enumerate(actors)}
    ready, late = ray.wait(list(pending), num_returns=len(pending), timeout=start_timeout)
    placed: list[tuple[int, str, list[str]]] = []
    failed = ""
    for ref in ready:
        try:
            ip, gpus = ray.get(ref)
            placed.append((pending[ref], ip, gpus))
        except Exception as e:
            failed = failed or (str(e).strip().splitlines() or [type(e).__name__])[0]
    if late or failed:
        for a in actors:
            ray.kill(a, no_restart=True)
        why = failed or f"{len(late)} of {count} did not start within {start_timeout:.0f} s"
        raise UserError(f"Ray workers could not start on {address!r}: {why} "
                        "(every node needs autokernel-tui installed, with the driver's Ray version)")
    placed.sort()
    per_node: Counter = Counter()
    workers = []
    for i, ip, gpus in placed:
        k = (gpus[0] if gpus else per_node[ip]) if device == "cuda" else per_node[ip]
        per_node[ip] += 1
        slot = f"{'gpu' if device == 'cuda' else 'cpu'}{k}"
        workers.append(RayWorker(actors[i], device, f"ray:{ip}/{slot}", f"cuda:{k}" if device == "cuda" else device))
    log.info("Ray workers: %s", ", ".join(w.label for w in workers))
    return workers
