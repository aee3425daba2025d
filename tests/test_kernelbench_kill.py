"""Nothing lost on a crash: `autokernel kernelbench` SIGKILLed during its second problem's first experiment,
then `autokernel kernelbench --resume PREFIX` (the real CLI, profiler, worker, playbook agent and store):
the finished problem is kept, the cut one goes on in its own session, the one not started runs, and the
score is the one the stored problem sessions give."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from autokernel.engine import events as ev
from autokernel.engine.kernelbench import Problem, fast_p, result_from_session
from autokernel.engine.search_state import stored_session
from autokernel.engine.store import Store

PROBLEMS = Path(__file__).parent / "kernelbench_problems" / "level1"
UNSEEDABLE = Path(__file__).parent / "data" / "kernelbench_unseedable" / "1_inverse.py"
FILES = [PROBLEMS / "1_softmax.py", PROBLEMS / "2_rmsnorm.py", UNSEEDABLE]  # the last: skipped (Inductor cannot seed it)


def _events(store, sid, cls):
    return [e for _, e in store.events(sid) if isinstance(e, cls)]


def _mid_second_experiment(store):
    """The second problem's session, once its first experiment is written and not yet decided."""
    batch = store.sessions(kind="kernelbench")
    if not batch:
        return None
    linked = {e.index: e.session_id for e in _events(store, batch[0]["id"], ev.ProblemStarted)}
    sid = linked.get(1)
    if sid and _events(store, sid, ev.CandidateWritten) and not _events(store, sid, ev.Decision):
        return sid
    return None


def test_a_killed_batch_resumes_with_nothing_lost_or_repeated(tmp_path):
    db = tmp_path / "kb.db"
    env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    cli = [sys.executable, "-m", "autokernel.engine.cli", "kernelbench"]
    proc = subprocess.Popen(cli + [*map(str, FILES), "--device", "cpu", "--max-experiments-per-problem", "1",
                                   "--db", str(db)],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cut = None
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and cut is None:
            cut = _mid_second_experiment(Store(db)) if db.exists() else None
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        err = proc.communicate(timeout=10)[1].decode()
    assert cut is not None, err[-3000:]
    store = Store(db)
    (batch,) = store.sessions(kind="kernelbench")
    assert batch["status"] == "interrupted" and store.session(cut)["status"] == "interrupted"
    (first_row,) = [e.result for e in _events(store, batch["id"], ev.ProblemDone)]
    first = first_row["session_id"]
    first_events, cut_events = store.events(first), store.events(cut)

    out = subprocess.run(cli + ["--resume", batch["id"][:-2], "--json", "--db", str(db)], capture_output=True,
                         text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"resuming batch {batch['id']}: 1 of 3 problems finished; 2_rmsnorm resumes from session {cut}" in out.stderr
    doc = json.loads(out.stdout)
    assert doc["batch_session"] == batch["id"] and doc["complete"] and doc["counted"] == 3
    assert [(r["name"], r["status"]) for r in doc["problems"]] == [
        ("1_softmax", "correct"), ("2_rmsnorm", "correct"), ("1_inverse", "skipped")]
    assert "Inductor could not seed it" in doc["problems"][2]["reason"]
    assert doc["problems"][0] == first_row  # kept as it was counted, never run again
    assert store.events(first) == first_events  # its session has no new event

    # the cut problem went on in its own session: what was written is kept, its experiment finished once
    assert doc["problems"][1]["session_id"] == cut and store.session(cut)["status"] == "completed"
    after = store.events(cut)
    assert [(s, e.payload()) for s, e in after[:len(cut_events)]] == [(s, e.payload()) for s, e in cut_events]
    assert len(_events(store, cut, ev.CandidateWritten)) == 1 and len(_events(store, cut, ev.Decision)) == 1
    assert len(_events(store, cut, ev.ProfileReady)) == 1 and len(_events(store, cut, ev.SessionStarted)) == 1
    assert any(c.action == "resume_session" for c in _events(store, cut, ev.ControlChanged))
    assert doc["problems"][1]["experiments"] == 1 and doc["problems"][1]["kernels"] == ["rmsnorm"]

    # the score is what the stored problem sessions say, and the batch is complete with it
    rows = [result_from_session(Problem(r["name"], Path(r["path"])), stored_session(store, r["session_id"]),
                                "playbook", 0.0) for r in doc["problems"]]
    assert [r.status for r in rows] == [r["status"] for r in doc["problems"]]
    assert doc["fast_p"] == fast_p(rows)
    assert len(store.sessions(kind="optimize")) == 3
    row = store.session(batch["id"])
    assert row["status"] == "completed" and row["summary"] == doc
