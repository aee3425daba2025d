"""The worker pipe's typed messages: each crosses the pipe intact, and a message neither side expects is a
clear error on the spot, never a wait that ends only at the stage timeout."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from multiprocessing.connection import Connection

import pytest

from autokernel.engine import worker_messages as wm
from autokernel.engine.results import CRASH, STAGES, BenchRecord, StageOutcome
from autokernel.engine.worker import Worker, _Duplex

RECORD = BenchRecord(kernel="softmax", backend="triton", shape={"rows": 4, "cols": 8}, dtype="fp32",
                     device_name="cpu", kernel_ms=1.5, eager_ms=2.0, compile_ms=None, metric="GB/s", achieved=3.0,
                     ceiling=10.0, fraction_of_ceiling=0.3, speedup_eager=1.33, speedup_compile=None,
                     meaningful=False, note="interpreter")

ONE_OF_EACH = [
    wm.CheckRequest(path="/tmp/c.py", kernel="softmax", backend="triton", module="ak_candidate_1_0",
                    extra_shapes=[{"rows": 3, "cols": 5}], problem=None, size=None, dtypes=["fp32"]),
    wm.BenchRequest(path="/tmp/c.py", kernel="softmax", backend="triton", module="ak_candidate_1_1",
                    shapes=[{"rows": 4, "cols": 8}], dtype="fp16", with_compile=False, problem="/tmp/p.py",
                    size="small"),
    wm.Exit(),
    wm.Ready(pid=1234, device="cpu"),
    wm.StageStarted("smoke"),
    wm.StageEnded(StageOutcome("smoke", "pass", "3 shapes", 0.25)),
    wm.Coverage(skipped_shapes=[{"rows": 4096, "cols": 4096}], shapes_total=27),
    wm.LoadError("SyntaxError: invalid syntax"),
    wm.Record(RECORD),
    wm.Fault("device fault: illegal memory access"),
    wm.Result("", exiting=False),
    wm.Result("MemoryError: out of memory", exiting=True),
]


def test_every_message_class_round_trips_through_pickle():
    classes = {obj for obj in vars(wm).values() if dataclasses.is_dataclass(obj) and obj.__module__ == wm.__name__}
    assert classes == {type(m) for m in ONE_OF_EACH}  # a new message class needs its sample here
    for message in ONE_OF_EACH:
        again = pickle.loads(pickle.dumps(message))
        assert type(again) is type(message) and again == message


def test_the_engine_accepts_each_reply_in_the_exchange_it_belongs_to():
    replies = {type(m) for m in ONE_OF_EACH} - {wm.CheckRequest, wm.BenchRequest, wm.Exit}
    accepted = set(wm.START_REPLIES) | set(wm.CHECK_REPLIES) | set(wm.BENCH_REPLIES)
    assert accepted == replies
    assert wm.Record not in wm.CHECK_REPLIES and wm.StageStarted not in wm.BENCH_REPLIES


@pytest.fixture
def scripted_worker():
    """A Worker whose "process" is a sleeping stand-in and whose pipe the test writes: it answers what the test
    puts on the pipe, so a child gone wrong can be played without starting torch."""
    engine_r, test_w = os.pipe()
    test_r, engine_w = os.pipe()
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    w = Worker(device="cpu", stage_timeout=20, load_timeout=20)
    w._proc, w._conn = stand_in, _Duplex(engine_r, engine_w)
    to_engine = Connection(test_w, readable=False)
    from_engine = Connection(test_r, writable=False)
    yield w, to_engine, from_engine, stand_in
    if stand_in.poll() is None:
        stand_in.kill()
        stand_in.wait()
    w.close()
    for c in (to_engine, from_engine):
        c.close()


@pytest.mark.parametrize("stray", [("stage_start", "smoke"), wm.Record(RECORD), "ready"],
                         ids=["an old tagged tuple", "a bench reply", "a bare string"])
def test_a_check_answered_with_an_unexpected_message_crashes_at_once_and_ends_the_worker(scripted_worker, stray):
    w, to_engine, from_engine, stand_in = scripted_worker
    to_engine.send(wm.StageStarted(STAGES[0]))
    to_engine.send(stray)
    seen = []
    report = w.check("/tmp/candidate.py", kernel="softmax", on_stage=lambda *a: seen.append(a[:2]))
    request = from_engine.recv()
    assert isinstance(request, wm.CheckRequest) and request.kernel == "softmax"
    first = report.stages[0]
    assert first.status == CRASH  # not TIMEOUT: the engine did not wait for an answer that would never come
    assert f"the worker sent an unexpected message during {STAGES[0]}: {type(stray).__name__}" in first.detail
    assert seen == [(STAGES[0], "running"), (STAGES[0], CRASH)]
    assert stand_in.wait(timeout=10) is not None  # the worker that said it was killed


def test_a_bench_answered_with_an_unexpected_message_raises_the_reason(scripted_worker):
    w, to_engine, from_engine, stand_in = scripted_worker
    to_engine.send(wm.Record(RECORD))
    to_engine.send(wm.Coverage([], 1))
    with pytest.raises(RuntimeError, match="the worker sent an unexpected message during timing softmax: Coverage"):
        w.bench("/tmp/candidate.py", kernel="softmax", shapes=[{"rows": 4, "cols": 8}], dtype="fp32")
    assert isinstance(from_engine.recv(), wm.BenchRequest)
    assert stand_in.wait(timeout=10) is not None


def test_a_bench_reads_its_records_and_result_from_the_typed_replies(scripted_worker):
    w, to_engine, _, _ = scripted_worker
    to_engine.send(wm.Record(RECORD))
    to_engine.send(wm.Result(""))
    assert w.bench("/tmp/candidate.py", kernel="softmax", shapes=[RECORD.shape], dtype="fp32") == [RECORD]


def test_the_worker_answers_a_request_it_does_not_know_and_stays_up():
    with Worker(device="cpu") as w:
        w._send(("check", {"path": "/tmp/candidate.py"}))  # the pipe's old, untyped form
        answer = w._recv(w.start_timeout, "an unknown request", (wm.Result,))
        assert "the worker does not know this request: tuple" in answer.error and not answer.exiting
        assert w._alive()
        w._conn.send(wm.Exit())
        assert w._proc.wait(timeout=30) == 0  # the same worker, still reading requests, took the next one
