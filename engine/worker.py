"""A worker subprocess that owns the device and runs candidates, so they can never take the engine down.

The engine talks to the worker over a pipe: one request (check or bench) at a time, and the
worker answers with a message as each stage starts and ends, then the result (each message a class of
`engine/worker_messages.py`, shared by both sides). The parent enforces a
timeout per stage; a hang, a segfault, `os._exit`, an illegal memory access (the CUDA context is
then unusable) or any other death of the worker ends that worker, the candidate is reported as
`timeout` or `crash` with the reason, and the next request starts a fresh worker. A healthy worker
is reused across candidates (starting one costs seconds: torch, CUDA context, Triton).

The worker is a plain `python -m autokernel.engine.worker` process (not multiprocessing's spawn, so
a user's script without a `__main__` guard can't fork-bomb), in its own process group so a stray
child of a candidate dies with it. On CPU it sets TRITON_INTERPRET=1 before anything imports Triton.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from . import sandbox
from .engine_watch import end_with_the_engine, kill_group
from .results import CRASH, FAIL, SKIPPED, STAGES, TIMEOUT, BenchRecord, CheckReport, StageOutcome
from .worker_messages import (BENCH_REPLIES, CHECK_REPLIES, START_REPLIES, BenchRequest, CheckRequest, Coverage,
                              Exit, Fault, LoadError, Ready, Record, Reply, Request, Result, StageEnded,
                              StageStarted)

StageCallback = Callable[[str, str, str, float], None]  # (stage, status, detail, seconds)


def _default_stage_timeout(device: str) -> float:
    # On a fresh GPU machine a stage may JIT-compile a Triton kernel for every shape and dtype of the
    # sweep (~1 s each, 27+ in the shape sweep), so the GPU gets the same allowance as the interpreter.
    return float(os.environ.get("AUTOKERNEL_STAGE_TIMEOUT", 120))


class WorkerDied(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class WorkerLost(Exception):
    """A worker that can no longer be used at all (a Ray actor or its node gone), as opposed to a candidate
    that crashed its worker: the pool runs the experiment again on another worker."""


class Worker:
    """The engine's handle on one worker process (see the module docstring)."""

    def __init__(self, device: str = "cpu", stage_timeout: float | None = None, load_timeout: float | None = None,
                 start_timeout: float = 180.0, visible_device: str | None = None, label: str | None = None):
        """`visible_device` (a CUDA device index) is the one GPU the process sees (`CUDA_VISIBLE_DEVICES`), so
        a pool of workers gives each its own device and no two time on one GPU."""
        self.device = device
        self.visible_device = visible_device
        # the device it owns, as the store records it: "cuda:3" is the host's GPU 3, whatever the child calls it
        self.device_id = f"{device}:{visible_device}" if visible_device is not None else device
        self.label = label or device  # what the TUI, the log and the store call this worker ("gpu0", "ray:host/gpu1")
        self.stage_timeout = stage_timeout or _default_stage_timeout(device)
        # Building a CUDA extension or autotuning a Triton kernel on first call can take minutes.
        self.load_timeout = load_timeout or max(self.stage_timeout, 600.0 if device == "cuda" else 120.0)
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._stderr_path: str | None = None
        self._ids = itertools.count()
        self._starts = 0
        self.restarts = 0  # fresh workers started after the first (crashes, hangs, retirements)
        self._starting: threading.Thread | None = None  # start_soon's thread, joined before the first request

    # -- process management ------------------------------------------------------------------
    def _start(self) -> None:
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        if self._stderr_path:  # the previous worker's log (its death was reported already)
            try:
                os.unlink(self._stderr_path)
            except OSError:
                pass
        fd, self._stderr_path = tempfile.mkstemp(prefix="autokernel-worker-", suffix=".log")
        env = sandbox.child_env()  # no credentials; the compile caches pinned (HOME becomes the scratch folder)
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        if self.visible_device is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.visible_device)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "autokernel.engine.worker", str(child_r), str(child_w), self.device],
            pass_fds=(child_r, child_w), stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
            start_new_session=True,
        )
        os.close(fd)
        os.close(child_r)
        os.close(child_w)
        self._conn = _Duplex(parent_r, parent_w)
        self._recv(self.start_timeout, "starting the worker", START_REPLIES)

    def start_soon(self) -> None:
        """Start the process now, on a thread of its own, so that a pool's workers come up side by side while
        the first experiment runs instead of one by one at their first requests. A start that fails here is
        tried again, and reported, by the first request."""
        if self._starting is None and not self._alive():
            self._starting = threading.Thread(target=self._start_quietly, daemon=True,
                                              name=f"autokernel-start-{self.label}")
            self._starting.start()

    def _start_quietly(self) -> None:
        try:
            self._ensure()
        except Exception:
            self._cleanup()

    def _join_start(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _ensure(self) -> None:
        if not self._alive():
            self._cleanup()
            self._starts += 1  # one that dies while it starts counts too
            self._start()
            self.restarts = self._starts - 1

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            kill_group(self._proc)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def _cleanup(self) -> None:
        self._kill()
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._proc = None

    def _last_stderr(self) -> str:
        try:
            lines = [ln.strip() for ln in Path(self._stderr_path or "").read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        interesting = [ln for ln in lines if "error" in ln.lower() or "Error" in ln]
        return (interesting or lines or [""])[-1][:300]

    def _death_reason(self, what: str) -> str:
        code = self._proc.poll() if self._proc else None
        if code is None:
            return f"worker stopped answering during {what}"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            why = f"worker died with {name} during {what}"
        else:
            why = f"worker exited with status {code} during {what}"
        tail = self._last_stderr()
        return f"{why}: {tail}" if tail else why

    def _recv(self, timeout: float, what: str, expected: tuple[type, ...]) -> Reply:
        """The worker's next message, one of the `expected` classes. A worker that dies, stays silent past
        `timeout` or answers with anything else is killed and raises WorkerDied."""
        assert self._conn is not None
        try:
            ready = self._conn.poll(timeout)
        except (EOFError, OSError):
            ready = True
        if not ready:
            self._kill()
            raise WorkerDied(TIMEOUT, f"no answer within {timeout:.0f} s during {what}: killed the worker")
        try:
            msg = self._conn.recv()
        except (EOFError, OSError, ConnectionResetError):
            if self._proc is not None:
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            raise WorkerDied(CRASH, self._death_reason(what)) from None
        if not isinstance(msg, expected):
            self._kill()
            raise WorkerDied(CRASH, f"the worker sent an unexpected message during {what}: {_describe(msg)}")
        return msg

    # -- requests ----------------------------------------------------------------------------
    def _send(self, request: Request) -> None:
        """Send a request, restarting a worker that died between requests or while it started (the request's
        candidate has not run yet, so that death is not its fault: an OOM killer, a user's kill)."""
        self._join_start()
        for attempt in (1, 2):
            try:
                self._ensure()
            except WorkerDied as e:
                self._cleanup()
                if attempt == 2 or e.status != CRASH:  # a start that hangs is not tried for another 180 s
                    raise
                continue
            try:
                self._conn.send(request)
                return
            except (BrokenPipeError, OSError):
                self._cleanup()
                if attempt == 2:
                    raise WorkerDied(CRASH, "the worker could not be reached (it died between requests)") from None

    def check(self, path: str, kernel: str, backend: str = "triton", on_stage: StageCallback | None = None,
              extra_shapes: list[dict] | None = None, problem: str | None = None,
              size: str | None = None, dtypes: list[str] | None = None) -> CheckReport:
        """The five stages on one candidate file, with live progress through `on_stage`. With `problem`
        (a problem file) the candidate is a whole-problem ModelNew (`engine/problem_spec.py`), the
        problem built at `size`. `dtypes` (names) checks only those of the spec's dtypes (screening)."""
        report = CheckReport(kernel=kernel, backend=backend, device=self.device, candidate=str(path))
        notify = on_stage or (lambda *a: None)
        try:
            self._send(CheckRequest(path=str(path), kernel=kernel, backend=backend, module=self._module_name(),
                                    extra_shapes=extra_shapes or [], problem=problem, size=size,
                                    dtypes=list(dtypes or [])))
        except WorkerDied as e:
            report.error = e.reason
            report.stages = [StageOutcome(STAGES[0], e.status, e.reason)] + [StageOutcome(s, SKIPPED, "") for s in STAGES[1:]]
            notify(STAGES[0], e.status, e.reason, 0.0)
            self._cleanup()
            return report
        current, started, timeout = "loading the candidate", time.perf_counter(), self.load_timeout
        done: dict[str, StageOutcome] = {}
        while True:
            try:
                msg = self._recv(timeout, current, CHECK_REPLIES)
            except WorkerDied as e:
                stage = current if current in STAGES else STAGES[0]
                outcome = StageOutcome(stage, e.status, e.reason, time.perf_counter() - started)
                done[stage] = outcome
                notify(stage, e.status, e.reason, outcome.seconds)
                self._cleanup()
                break
            match msg:
                case StageStarted(stage):
                    current, started = stage, time.perf_counter()
                    # The first stage also compiles the kernel (Triton JIT, autotune, CUDA build).
                    timeout = self.load_timeout if current == STAGES[0] else self.stage_timeout
                    notify(current, "running", "", 0.0)
                case StageEnded(o):
                    done[o.name] = o
                    notify(o.name, o.status, o.detail, o.seconds)
                case Coverage(skipped, total):  # the shapes the stages will not run at full size (CPU interpreter)
                    report.skipped_shapes, report.shapes_total = skipped, total
                case LoadError(reason):
                    report.error = reason
                    o = StageOutcome(STAGES[0], FAIL, reason)
                    done[o.name] = o
                    notify(o.name, o.status, o.detail, 0.0)
                case Fault(reason):  # the device context is broken: the worker exits after this
                    stage = current if current in STAGES else STAGES[0]
                    o = StageOutcome(stage, CRASH, reason, time.perf_counter() - started)
                    done[stage] = o
                    notify(stage, CRASH, reason, o.seconds)
                    self._cleanup()
                    break
                case Result(error, exiting):
                    if error:
                        report.error = report.error or error
                    if exiting:  # the worker retires itself after this answer
                        self._cleanup()
                    break
        for s in STAGES:
            if s in done:
                report.stages.append(done[s])
            else:
                report.stages.append(StageOutcome(s, SKIPPED, "an earlier stage failed"))
        return report

    def bench(self, path: str, kernel: str, shapes: list[dict], dtype: str, backend: str = "triton",
              with_compile: bool | None = None, problem: str | None = None,
              size: str | None = None) -> list[BenchRecord]:
        """Time a candidate that passed, against eager and torch.compile, at each shape (`problem`: a
        whole-problem ModelNew against the problem's Model)."""
        try:
            self._send(BenchRequest(path=str(path), kernel=kernel, backend=backend, module=self._module_name(),
                                    shapes=shapes, dtype=dtype, with_compile=with_compile, problem=problem,
                                    size=size))
        except WorkerDied as e:
            raise RuntimeError(e.reason) from None
        per_shape = self.load_timeout + self.stage_timeout
        records: list[BenchRecord] = []
        while True:
            try:
                msg = self._recv(per_shape, f"timing {kernel}", BENCH_REPLIES)
            except WorkerDied as e:
                self._cleanup()
                raise RuntimeError(e.reason) from None
            match msg:
                case Record(record):
                    records.append(record)
                case Fault(reason):
                    self._cleanup()
                    raise RuntimeError(reason)
                case Result(error, exiting):
                    if exiting:
                        self._cleanup()
                    if error:
                        raise RuntimeError(error)
                    return records

    def close(self) -> None:
        self._join_start()
        if self._alive() and self._conn is not None:
            try:
                self._conn.send(Exit())
                self._proc.wait(timeout=5)
            except Exception:
                pass
        self._cleanup()
        if self._stderr_path:
            try:
                os.unlink(self._stderr_path)
            except OSError:
                pass

    def _module_name(self) -> str:
        """A fresh name to import the next candidate under, so no two requests share a module."""
        return f"ak_candidate_{os.getpid()}_{next(self._ids)}"

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten worker must not outlive the engine, nor its log stay behind
        try:
            self._kill()
            if self._stderr_path:
                os.unlink(self._stderr_path)
        except Exception:
            pass


def _describe(msg: Any) -> str:
    """A message the engine did not expect, short enough for a stage's detail."""
    return f"{type(msg).__name__} {msg!r}"[:200]


class _Duplex:
    """One read fd and one write fd as a single pickling connection."""

    def __init__(self, read_fd: int, write_fd: int):
        self._r = Connection(read_fd, writable=False)
        self._w = Connection(write_fd, readable=False)

    def send(self, obj: Any) -> None:
        self._w.send(obj)

    def recv(self) -> Any:
        return self._r.recv()

    def poll(self, timeout: float) -> bool:
        return self._r.poll(timeout)

    def close(self) -> None:
        for c in (self._r, self._w):
            try:
                c.close()
            except OSError:
                pass


# -- the worker side ---------------------------------------------------------------------------

def _spec_for(req: CheckRequest | BenchRequest, device: str) -> Any:
    """The kernel type's spec, or a whole problem's (`req.problem`, built once per worker)."""
    if req.problem:
        from .problem_spec import problem_spec

        return problem_spec(req.problem, device, req.size)
    from autokernel.kernels import get_spec

    return get_spec(req.kernel)


def _screen_dtypes(spec: Any, names: list[str] | None) -> tuple | None:
    """The spec's dtypes named in `names`, in the spec's order; None (all) when none of them is the spec's."""
    if not names:
        return None
    from autokernel.kernels.spec import dtype_from_name

    wanted = {dtype_from_name(n) for n in names}
    picked = tuple(d for d in spec.dtypes if d in wanted)
    return picked or None


def _serve(conn: _Duplex, device: str) -> None:
    from . import guards, harness, l2  # noqa: F401  (guards first of all: its clocks are the clean ones)

    harness.launch_tracker()
    if device == "cuda":  # the driver library loaded, and no L2 set aside, before any candidate
        import torch

        torch.zeros(1, device="cuda")
        l2.reset(device)
    try:  # dynamo replaces a few torch functions when first imported: let that happen before any watch
        import torch._dynamo  # noqa: F401
    except Exception:
        pass
    sandbox.forbid_processes(device)  # the worker's own threads and builds are up: from here, candidates only
    baseline_rss = _resident_bytes()
    conn.send(Ready(pid=os.getpid(), device=device))
    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        if isinstance(req, Exit):
            return
        if not isinstance(req, (CheckRequest, BenchRequest)):  # answered, so the engine is not left waiting
            conn.send(Result(f"the worker does not know this request: {_describe(req)}"))
            continue
        answer, held_before = _handle(conn, device, req)
        _let_go(device)  # the request's candidate, its inputs and outputs are unreferenced now: hand them back
        if answer is None:  # a device fault, already told: this worker ends
            return
        # A later candidate must not inherit what a hog allocated (it stays with its module): a fresh worker.
        if not answer.exiting and (_grown(baseline_rss) or _left_on_device(device, held_before)):
            answer = Result(answer.error, exiting=True)
        conn.send(answer)
        if answer.exiting:
            return


def _handle(conn: _Duplex, device: str, req: CheckRequest | BenchRequest) -> tuple[Result | None, int | None]:
    """One request, run; returns its closing answer (None after a device fault, which ends the worker) and the
    device memory held just before the candidate loaded. Everything it built (the bound candidate, the check's
    context) is local here, so none of it outlives the request: the caller sends the answer once it is gone."""
    from . import check_tuning, guards, harness, precompile, timing

    held_before = None
    try:
        try:
            spec = _spec_for(req, device)
        except Exception as e:  # the problem itself does not load or returns no tensor (or tuple of tensors)
            why = f"the problem: {type(e).__name__}: {harness._first_line(e)}"
            conn.send(LoadError(why))
            traceback.print_exc()
            return Result(why), None
        if isinstance(req, BenchRequest) and timing.times_compile(device, req.with_compile):
            for shape in req.shapes:  # torch's compile threads come up before the snapshot: they are not the candidate's
                timing.compile_ahead(spec, shape, req.dtype, device)
        held_before = _held_on_device(device)  # the problem and its baselines are built: the rest is the candidate's
        threads_before = guards.thread_snapshot()
        with guards.untouched() as watch:
            try:
                fn = harness.bind_candidate(spec, harness.load_candidate(req.path, req.module, spec.entry))
                _refuse_at_import(guards, threads_before)
            except harness.CandidateError as e:
                conn.send(LoadError(str(e)))
                # what it left behind stays in this process
                return Result(str(e), exiting=guards.replaced() or guards.threads_left(threads_before)), held_before
            module = sys.modules.get(req.module)
            check_tuning.on_the_interpreter(module, device)  # which gives Triton's autotuner no timer of its own
            match req:
                case CheckRequest():
                    ctx = harness.CheckContext(spec, fn, device, extra_shapes=list(req.extra_shapes),
                                               dtypes=_screen_dtypes(spec, req.dtypes))
                    unrun, total = harness.unrun_shapes(ctx)
                    conn.send(Coverage(unrun, total))
                    if precompile.enabled() and spec.entry == "kernel_fn":  # a whole problem builds models: no
                        precompile.warm(ctx, module)
                    with check_tuning.brief(module, device):  # the stages judge results, not a config's speed
                        for _ in harness.run_stages(ctx, on_start=lambda s: conn.send(StageStarted(s)),
                                                    on_end=lambda o: conn.send(StageEnded(o))):
                            pass
                case BenchRequest():  # tuned with Triton's own timer (on a GPU)
                    for shape in req.shapes:
                        rec = timing.bench(spec, fn, shape, req.dtype, device, backend=req.backend,
                                           with_compile=req.with_compile)
                        conn.send(Record(rec))
        changed = watch.changed()
        if changed:
            # The candidate replaced torch functions: its verdict, and every later reference in
            # this process, would be suspect. Reject it and end this worker.
            return Result(f"the candidate {guards.replaced_reason(changed, 'while it was checked')}",
                          exiting=True), held_before
        # A later candidate must not share the process with threads left running: a fresh worker for the next.
        return Result("", exiting=guards.threads_left(threads_before)), held_before
    except harness.DeviceFault as e:
        conn.send(Fault(f"device fault: {e}"))
        return None, held_before
    except Exception as e:
        if harness.is_device_fault(e):
            conn.send(Fault(f"device fault: {type(e).__name__}: {harness._first_line(e)}"))
            return None, held_before
        traceback.print_exc()
        return Result(f"{type(e).__name__}: {harness._first_line(e)}", exiting=isinstance(e, MemoryError)), held_before


def _let_go(device: str) -> None:
    """Between requests: drop the compiled baselines of problems this worker no longer holds (they keep
    those problems' Models alive), then collect and hand back the caching allocator's unused blocks."""
    from . import fit, timing
    from .problem_spec import _SPECS, PROBLEM_TARGET

    current = {spec.eager for spec in _SPECS.values()}
    for key in [k for k in timing._COMPILED if k[0] == PROBLEM_TARGET and k[1] not in current]:
        timing._COMPILED.pop(key, None)
        timing._COMPILE_ERRORS.pop(key, None)
    fit.release(device)


def _resident_bytes() -> int:
    """This process's resident memory now (0 where /proc is not there to say)."""
    try:
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _growth_limit() -> float:
    """How much more memory a worker may hold after a request before it retires (AUTOKERNEL_WORKER_GROWTH_GB,
    default 2 GiB): a candidate that allocated until it failed leaves it all behind, and the next one would
    inherit it (and a GPU left full makes every later candidate "not fit")."""
    return float(os.environ.get("AUTOKERNEL_WORKER_GROWTH_GB", 2)) * 2**30


def _grown(baseline: int) -> bool:
    """Whether the worker's resident memory grew past the limit since it was ready."""
    return bool(baseline) and _resident_bytes() - baseline > _growth_limit()


def _held_on_device(device: str) -> int | None:
    """Bytes of live tensors on the GPU now (None on CPU, where resident memory says it)."""
    if not str(device).startswith("cuda"):
        return None
    import torch

    return torch.cuda.memory_allocated()


def _left_on_device(device: str, before: int | None) -> bool:
    """Whether the request left tensors on the GPU past the limit once its own references were gone: the
    problem and its baselines were built before `before` was read, so the growth is the candidate's."""
    after = _held_on_device(device)
    return before is not None and after is not None and after - before > _growth_limit()


def _refuse_at_import(guards: Any, threads_before: tuple) -> None:
    """A candidate that replaced a module's attribute or left a thread running by the time it was
    imported (and built) is refused before its first call: either would act behind every check."""
    from .harness import CandidateError

    changed = guards.replaced()
    if changed:
        raise CandidateError(guards.replaced_reason(changed, "at import"))
    threads = guards.threads_left(threads_before, "after import")
    if threads:
        raise CandidateError(threads)


def main(argv: list[str]) -> None:
    read_fd, write_fd, device = int(argv[0]), int(argv[1]), argv[2]
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    # Confined while it has one thread and has imported nothing of torch: what the worker and every later
    # candidate may reach (network, writable paths) is fixed here; processes are refused after warm-up.
    scratch = sandbox.make_scratch()
    sandbox.confine(scratch, device)
    end_with_the_engine(read_fd, before=lambda: shutil.rmtree(scratch, ignore_errors=True))  # the request pipe
    conn = _Duplex(read_fd, write_fd)
    try:
        _serve(conn, device)
    finally:
        conn.close()
        shutil.rmtree(scratch, ignore_errors=True)
    os._exit(0)  # skip interpreter teardown (CUDA/Triton atexit work is not needed)


if __name__ == "__main__":
    main(sys.argv[1:])
