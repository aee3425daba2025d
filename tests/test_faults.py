"""Faults an unattended night meets, each through `autokernel optimize --headless` as a user runs it (real
worker processes, a real SQLite file, a real local LLM server): the LLM server dropping the connection,
answering 429 with Retry-After and garbage; a worker SIGKILLed mid-stage; a candidate that hangs; one that
allocates until it cannot; the engine itself SIGKILLed and resumed. Each time the engine stays up, the
faulty experiment is recorded with its reason, the next experiment runs, and nothing is lost. (The LLM
agent alone against a slow server: tests/test_llm_agent.py; the store on a full disk: test_store_faults.py.)
"""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.store import Store

from llm_support import llm_server  # noqa: F401  (a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from soak import alive, workers_of  # noqa: E402
from soak_ledger import integrity  # noqa: E402
from soak_llm import answer_text  # noqa: E402  (the soak's candidates: correct, hanging, memory-hogging)

MODEL = ("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
         "        return torch.softmax(x * 2.0, dim=-1)\n\n\ndef get_inputs():\n    return [torch.randn(64, 512)]\n")


def _optimize(tmp_path: Path, *args: str, server=None, env: dict | None = None, memory_gb: float | None = None,
              ) -> subprocess.Popen:
    """`autokernel optimize --headless` on a one-softmax model in the background (the playbook agent unless
    a server is given), its database tmp_path/s.db."""
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    argv = [sys.executable, "-m", "autokernel.engine.cli", "optimize", "--headless", "--device", "cpu",
            "--no-integrate", "--db", str(tmp_path / "s.db"), *args]
    if "--resume" not in args:
        argv.insert(4, str(model))
    if server is not None:
        argv += ["--agent", "openai/test-model", "--api-base", server.api_base]
    full_env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"), OPENAI_API_KEY="sk-test-not-real",
                    **(env or {}))

    def cap() -> None:  # the memory hog meets a MemoryError, not the host's OOM killer
        if memory_gb:
            limit = int(memory_gb * (1 << 30))
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.Popen(argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, preexec_fn=cap)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _events(tmp_path: Path) -> list[ev.Event]:
    store = Store(tmp_path / "s.db")
    (row,) = store.sessions()
    events = [e for _, e in store.events(row["id"])]
    store.close()
    return events


def _decisions(events: list[ev.Event]) -> dict[int, ev.Decision]:
    """Experiment number -> its decision."""
    number = {e.candidate_id: e.experiment for e in events if isinstance(e, ev.CandidateWritten)}
    return {number[e.candidate_id]: e for e in events if isinstance(e, ev.Decision)}


def _timed(events: list[ev.Event]) -> set[str]:
    return {e.candidate_id for e in events if isinstance(e, ev.BenchResult)}


def _stage_running(db: Path, experiment: int, stage: str) -> bool:
    """Whether experiment `experiment` has reached `stage` and is not decided (read-only, no Store)."""
    if not db.exists():
        return False
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = conn.execute("SELECT type, payload FROM events ORDER BY seq").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    cid = f"softmax-{experiment:04d}"
    mine = [(t, p) for t, p in rows if f'"candidate_id": "{cid}"' in p]
    return any(t == "stage_result" and f'"stage": "{stage}"' in p and '"status": "running"' in p for t, p in mine) \
        and not any(t == "decision" for t, _ in mine)


def _wait_until(predicate, proc: subprocess.Popen, timeout: float = 400) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            pytest.fail(f"the engine ended early ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"not reached within {timeout} s")


def test_the_llm_server_dropping_rate_limiting_and_talking_garbage_costs_no_experiment(llm_server, tmp_path):
    llm_server.play({"drop": True}, {"status": 429, "error": "slow down", "headers": {"Retry-After": "1"}},
                    "I would use more warps. Good luck!", answer_text(1))
    out, err = _finish(_optimize(tmp_path, "--max-experiments", "2", server=llm_server))
    assert len(llm_server.requests) == 4, err[-3000:]
    events = _events(tmp_path)
    notes = [e.message for e in events if isinstance(e, ev.Log) and e.message.startswith("agent:")]
    assert len(notes) == 3, notes
    assert "retrying in" in notes[0]  # the dropped connection, tried again
    assert "RateLimitError (429)" in notes[1] and "retrying in" in notes[1]
    assert "unusable" in notes[2] and "asking again" in notes[2]
    assert not [e for e in events if isinstance(e, ev.ErrorEvent)]
    decided = _decisions(events)
    assert sorted(decided) == [1, 2] and decided[2].candidate_id in _timed(events)  # the answer ran and passed
    assert "[t1] Variant 1" in out and "session completed" in out


def test_a_worker_killed_mid_stage_fails_that_experiment_and_the_next_runs(tmp_path):
    proc = _optimize(tmp_path, "--max-experiments", "3")
    try:
        _wait_until(lambda: _stage_running(tmp_path / "s.db", 2, "shape_sweep") and workers_of(proc.pid), proc)
        for pid in workers_of(proc.pid):
            os.kill(pid, signal.SIGKILL)
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    events = _events(tmp_path)
    decided = _decisions(events)
    assert sorted(decided) == [1, 2, 3]
    assert decided[2].decision == "failed" and "worker died with SIGKILL during shape_sweep" in decided[2].reason
    assert decided[3].candidate_id in _timed(events)  # a fresh worker checked and timed the next one
    assert integrity(tmp_path / "s.db") == "ok"


# The hanging candidate spins a core until the stage timeout: short, yet three times the longest stage the
# softmax starter takes on a busy two-core machine, so no honest stage meets it.
HANG_TIMEOUT_S = 15


def test_a_hanging_candidate_times_out_and_the_next_runs(llm_server, tmp_path):
    llm_server.play(answer_text(1, "cand_hang"), answer_text(2))
    out, err = _finish(_optimize(tmp_path, "--max-experiments", "3", server=llm_server,
                                 env={"AUTOKERNEL_STAGE_TIMEOUT": str(HANG_TIMEOUT_S)}))
    assert "session completed" in out, err[-3000:]
    events = _events(tmp_path)
    decided = _decisions(events)
    assert decided[2].decision == "failed" and f"no answer within {HANG_TIMEOUT_S} s during shape_sweep" in decided[2].reason
    assert decided[3].candidate_id in _timed(events)


def test_a_stop_leaves_a_hung_experiment_to_the_resume_after_the_grace(llm_server, tmp_path):
    """SIGTERM while a candidate hangs (its stage timeout far off): the engine waits the stop's grace, says it
    leaves the experiment to the resume and exits 130; the hung worker goes with it, the store stays whole."""
    llm_server.play(answer_text(1, "cand_hang"))
    proc = _optimize(tmp_path, "--max-experiments", "3", server=llm_server,
                     env={"AUTOKERNEL_STAGE_TIMEOUT": "3600", "AUTOKERNEL_STOP_GRACE_S": "5"})
    try:
        _wait_until(lambda: _stage_running(tmp_path / "s.db", 2, "shape_sweep") and workers_of(proc.pid), proc)
        workers = workers_of(proc.pid)
        proc.send_signal(signal.SIGTERM)
        out, err = _finish(proc, timeout=240)  # without the grace: the stage timeout, an hour
    finally:
        _finish(proc)
    assert proc.returncode == 130, err[-3000:]
    assert "still under way 5 s after the stop" in err and "leaving it to the resume" in err, err[-3000:]
    deadline = time.monotonic() + 60  # the worker sees its engine's pipe hang up and ends its process group
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(alive(p) for p in workers)
    decided = _decisions(_events(tmp_path))
    assert 2 not in decided  # never recorded as failed: the resume runs it again
    assert integrity(tmp_path / "s.db") == "ok"


def test_a_candidate_that_eats_memory_fails_and_the_next_runs(llm_server, tmp_path):
    llm_server.play(answer_text(1, "cand_hog"), answer_text(2))
    out, err = _finish(_optimize(tmp_path, "--max-experiments", "3", server=llm_server, memory_gb=4))
    assert "session completed" in out, err[-3000:]
    events = _events(tmp_path)
    decided = _decisions(events)
    assert decided[2].decision == "failed" and "MemoryError" in decided[2].reason, decided[2]
    assert decided[3].candidate_id in _timed(events), decided[3]  # no memory the hog took is held against it


def test_the_engine_killed_mid_experiment_resumes_with_nothing_lost(tmp_path):
    proc = _optimize(tmp_path, "--max-experiments", "3")
    try:
        _wait_until(lambda: _stage_running(tmp_path / "s.db", 2, "shape_sweep") and workers_of(proc.pid), proc)
        orphans = workers_of(proc.pid)
        proc.send_signal(signal.SIGKILL)
    finally:
        _finish(proc)
    store = Store(tmp_path / "s.db")
    (row,) = store.sessions()
    sid = row["id"]
    assert row["status"] == "interrupted"
    before = [(s, e.type, e.payload()) for s, e in store.events(sid)]
    store.close()
    deadline = time.monotonic() + 120  # the killed engine's worker ends at its next message to it
    while any(alive(p) for p in orphans) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(alive(p) for p in orphans)

    out, err = _finish(_optimize(tmp_path, "--resume", sid))
    assert "session completed" in out, err[-3000:]
    store = Store(tmp_path / "s.db")
    after = [(s, e.type, e.payload()) for s, e in store.events(sid)]
    store.close()
    assert after[: len(before)] == before  # nothing written before the kill changed
    assert [s for s, _, _ in after] == list(range(1, len(after) + 1))
    events = _events(tmp_path)
    written = [e.experiment for e in events if isinstance(e, ev.CandidateWritten)]
    assert written == [1, 2, 3]
    decisions = [e.candidate_id for e in events if isinstance(e, ev.Decision)]
    assert sorted(decisions) == ["softmax-0001", "softmax-0002", "softmax-0003"]  # the cut one once, after resume
    assert integrity(tmp_path / "s.db") == "ok"
