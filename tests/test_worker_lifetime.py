"""A worker lives across candidates unless one of them leaves something behind: the threads torch's own
compiler starts for the torch.compile baseline are not the candidate's and must not retire it, and a pool's
workers come up side by side before their first request."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autokernel.engine.pool import make_workers
from autokernel.engine.worker import Worker
from autokernel.kernels import get_spec

CHEATS = Path(__file__).parent / "cheat_candidates"


@pytest.fixture()
def worker():
    w = Worker(device="cpu")
    yield w
    w.close()


def test_the_compile_baseline_does_not_retire_the_worker(worker):
    """torch.compile starts threads of its own at its first use in a process (whether or not it then
    compiles there); the bench compiles the baseline before it looks at threads, so the worker carries on."""
    spec = get_spec("rmsnorm")
    starter = str(spec.starters["triton"])
    for _ in range(2):
        (rec,) = worker.bench(starter, kernel="rmsnorm", shapes=[dict(spec.smoke_shape)], dtype="fp32",
                              with_compile=True)
        assert (rec.kernel, rec.shape) == ("rmsnorm", dict(spec.smoke_shape))
    assert worker.restarts == 0 and worker._alive()


def test_a_candidates_own_thread_still_retires_the_worker_after_a_compiled_bench(worker):
    spec = get_spec("softmax")
    (rec,) = worker.bench(str(spec.starters["triton"]), kernel="softmax", shapes=[{"rows": 16, "cols": 256}],
                          dtype="fp32", with_compile=True)
    assert (rec.kernel, rec.shape) == ("softmax", {"rows": 16, "cols": 256})
    report = worker.check(str(CHEATS / "background_thread.py"), kernel="softmax")
    assert not report.passed and "after the call returns" in report.first_failure.detail
    assert not worker._alive()  # it retired itself after that answer; the next request starts a fresh one


def test_a_pools_workers_start_side_by_side_before_their_first_request():
    workers = make_workers("cpu", "2")
    try:
        assert all(w._starting is not None for w in workers)  # each on its own thread, at once
        for w in workers:
            w._join_start()
        assert [w._alive() for w in workers] == [True, True]
        pids = {w._proc.pid for w in workers}
        report = workers[1].check(str(get_spec("reduce").starters["triton"]), kernel="reduce")
        assert report.passed, report.to_json()
        assert {w._proc.pid for w in workers} == pids and [w.restarts for w in workers] == [0, 0]
    finally:
        for w in workers:
            w.close()
    (one,) = make_workers("cpu", "1")  # one worker: started by its first request, as always
    assert one._starting is None and not one._alive()
    one.close()


def test_compiling_ahead_makes_inputs_only_for_a_baseline_not_compiled_yet(monkeypatch):
    """Every bench request compiles ahead; once a shape's baseline is compiled (or known not to compile), a
    request makes no sample inputs for it again (at a KernelBench size those are gigabytes)."""
    import dataclasses

    import torch

    from autokernel.engine import timing

    made = []
    base = get_spec("softmax")
    spec = dataclasses.replace(base, make_inputs=lambda *a, **k: made.append(a[0]) or base.make_inputs(*a, **k))

    def no_compiler(*a, **k):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", no_compiler)  # the baseline is then recorded as not compiling
    monkeypatch.setattr(timing, "_COMPILED", {})
    monkeypatch.setattr(timing, "_COMPILE_ERRORS", {})
    shape = {"rows": 4, "cols": 64}
    for _ in range(3):
        timing.compile_ahead(spec, shape, "fp32", "cpu")
    assert made == [shape] and list(timing._COMPILE_ERRORS.values()) == ["torch.compile failed: RuntimeError: no compiler here"]


def test_a_worker_killed_while_it_starts_is_started_again_and_the_candidate_still_runs(worker, monkeypatch):
    """A worker SIGKILLed before it answered its start (an OOM killer, a user's kill: the soak's worker_kill)
    never ran the candidate, so the candidate is not failed for it: a fresh worker runs it."""
    import subprocess

    from autokernel.engine import worker as worker_module

    real = subprocess.Popen
    started = []

    def popen(argv, **kw):
        started.append(argv)
        if len(started) == 1:  # the first worker dies before it says it is ready
            argv = [argv[0], "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
        return real(argv, **kw)

    monkeypatch.setattr(worker_module.subprocess, "Popen", popen)
    report = worker.check(str(get_spec("reduce").starters["triton"]), kernel="reduce")
    assert report.passed, report.to_json()
    assert len(started) == 2 and worker.restarts == 1


_ENGINE = """
import sys
from autokernel.engine.worker import Worker

w = Worker(device="cpu", stage_timeout=3600)
w._ensure()
print("worker", w._proc.pid, flush=True)
w.check(sys.argv[1], kernel="softmax", on_stage=lambda stage, status, *_: print(stage, status, flush=True))
"""


def alive(pid: int) -> bool:
    """The process exists and is no zombie (a killed engine's children are reaped by whoever adopts them)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _kill_and_expect_gone(engine: subprocess.Popen, pid: int) -> None:
    """SIGKILL the engine; its child `pid` must be gone within a minute."""
    engine.kill()
    engine.wait()
    deadline = time.monotonic() + 60
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(pid)


def _leave_no_orphan(engine: subprocess.Popen, pid: int | None) -> None:
    engine.kill()
    if pid and alive(pid):  # the failing case: leave no spinning orphan behind
        os.kill(pid, signal.SIGKILL)


def test_a_worker_mid_stage_ends_when_its_engine_is_killed(tmp_path):
    """The engine SIGKILLed while a candidate hangs: nobody will ever read the worker's answer, so the worker
    (and the device it holds) must go at once, not at its next message or never."""
    starter = get_spec("softmax").starters["triton"]
    hang = tmp_path / "hang.py"  # spins forever once it has run the kernel
    hang.write_text(Path(starter).read_text().replace("def kernel_fn(", "def _kernel(", 1)
                    + "\n\ndef kernel_fn(x):\n    y = _kernel(x)\n    while True:\n        pass\n")
    engine = subprocess.Popen([sys.executable, "-c", _ENGINE, str(hang)], stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(engine.stdout.readline().split()[1])
        for line in engine.stdout:  # wait until the hanging stage is under way
            if line.split() == ["smoke", "running"]:
                break
        _kill_and_expect_gone(engine, pid)
    finally:
        _leave_no_orphan(engine, pid)


_INTEGRATING_ENGINE = """
import sys
from pathlib import Path
from autokernel.engine.integrate import integrate_session_kernels

source = Path(sys.argv[2]).read_text()
integrate_session_kernels(sys.argv[1], "cpu", [{"kind": "problem", "candidate_id": "problem-0001", "source": source}],
                          Path(sys.argv[3]), mode="kernelbench", timeout_s=3600)
"""

_HANGING_MODEL_NEW = """
import os
from pathlib import Path

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []


class ModelNew(Model):
    def forward(self, x):
        Path(__file__).with_name("pid").write_text(str(os.getpid()))
        while True:
            pass
"""


def test_an_integration_ends_when_its_engine_is_killed(tmp_path):
    """The integration child checks and times the kept code in a process of its own, for minutes on a big model:
    orphaned, it would hold the device from the resumed session's integration and spoil its timings."""
    problem, candidate, workdir = tmp_path / "problem.py", tmp_path / "candidate.py", tmp_path / "integration"
    candidate.write_text(_HANGING_MODEL_NEW)
    problem.write_text(_HANGING_MODEL_NEW.split("class ModelNew")[0])
    engine = subprocess.Popen([sys.executable, "-c", _INTEGRATING_ENGINE, str(problem), str(candidate), str(workdir)])
    pid = None
    try:
        deadline = time.monotonic() + 240
        while not (workdir / "pid").exists():  # ModelNew's first call, in the child, is under way
            assert engine.poll() is None and time.monotonic() < deadline, "the integration never reached ModelNew"
            time.sleep(0.2)
        time.sleep(0.5)  # the pid is written whole
        pid = int((workdir / "pid").read_text())
        _kill_and_expect_gone(engine, pid)
    finally:
        _leave_no_orphan(engine, pid)
