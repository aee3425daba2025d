"""Problems side by side (engine/kernelbench_lanes.py): a batch with two lanes runs two problems at once, each
in a child process of its own; a child killed without a row leaves its problem `error` and the batch goes on;
stop() stops the children's sessions cleanly, and the resumed batch finishes them without running a finished
problem again. The children are real processes whose sessions run on the loop's doubles
(tests/kernelbench_lane_child.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from autokernel.engine import cli
from autokernel.engine import events as ev
from autokernel.engine import kernelbench_lanes
from autokernel.engine.kernelbench import BatchConfig, KernelBenchBatch, discover
from autokernel.engine.kernelbench_lanes import LaneBatch
from autokernel.engine.kernelbench_resume import load_batch
from autokernel.engine.store import Store

from loop_doubles import PROBLEM_SRC

HERE = Path(__file__).parent
# 1_slow runs until stopped, 2_slow until killed; then 3_wrong_slow (stopped, then incorrect) takes the second
# lane, so that 4_good is still waiting when the batch stops
NAMES = ["1_slow.py", "2_slow.py", "3_wrong_slow.py", "4_good.py"]
PER_PROBLEM = 3


@pytest.fixture
def problems(tmp_path, monkeypatch):
    folder = tmp_path / "problems"
    folder.mkdir()
    for name in NAMES:
        (folder / name).write_text(PROBLEM_SRC)
    monkeypatch.setattr(kernelbench_lanes, "CHILD", (sys.executable, str(HERE / "kernelbench_lane_child.py")))
    monkeypatch.setenv("LANE_SPECS", str(tmp_path))
    monkeypatch.delenv("LANE_SLOW_ENDS", raising=False)
    return discover([folder])[0]


def _wait(condition) -> None:
    """Until `condition()` holds; a batch that never gets there is ended by the test's pytest timeout."""
    while not condition():
        time.sleep(0.05)


def _events(store, sid, cls=ev.Event):
    return [e for _, e in store.events(sid) if isinstance(e, cls)]


@pytest.mark.timeout(600)
def test_two_lanes_run_side_by_side_a_killed_child_errs_and_a_stopped_batch_resumes(tmp_path, problems,
                                                                                      monkeypatch):
    store = Store(tmp_path / "s.db")
    config = BatchConfig(device="cpu", max_experiments=PER_PROBLEM, command="autokernel kernelbench X", lanes=2)
    started, ended = [], []
    batch = LaneBatch(problems, config, store, on_start=lambda i, p: started.append(i),
                      on_result=lambda i, r: ended.append(i))
    job = threading.Thread(target=batch.run)
    job.start()
    try:
        # the two slow problems run at the same time, each in a process of its own
        _wait(lambda: {0, 1} <= set(batch.sessions) and all(
            _events(store, batch.sessions[i], ev.Decision) for i in (0, 1)))
        first, killed = batch.sessions[0], batch.sessions[1]
        rows = [store.session(first), store.session(killed)]
        assert [r["status"] for r in rows] == ["running", "running"]
        pids = {r["pid"] for r in rows}
        assert len(pids) == 2 and os.getpid() not in pids
        os.kill(store.session(killed)["pid"], signal.SIGKILL)
        # the lane goes on with the next problem while the first one still runs
        _wait(lambda: 1 in batch.rows and 2 in batch.sessions)
        assert 0 not in batch.rows and store.session(first)["status"] == "running"
    finally:
        batch.stop()
        job.join()  # the batch ends once its children stopped (else the test's pytest timeout ends it)
    report = store.session(batch.batch_id)["summary"]
    assert [r["status"] for r in report["problems"]] == ["stopped", "error", "stopped"]
    assert [r["name"] for r in report["problems"]] == ["1_slow", "2_slow", "3_wrong_slow"]
    assert report["lanes"] == 2 and not report["complete"] and report["counted"] == 1
    assert sorted(started) == sorted(ended) == [0, 1, 2] and ended[0] == 1  # none started after the stop
    lost = report["problems"][1]
    assert lost["session_id"] == killed and "exit code -9, SIGKILL" in lost["reason"]
    assert f"autokernel optimize --headless --resume {killed}" in lost["reason"]
    third = batch.sessions[2]
    assert [store.session(sid)["status"] for sid in (first, third, batch.batch_id)] == ["stopped"] * 3
    linked = {e.index: e.session_id for e in _events(store, batch.batch_id, ev.ProblemStarted)}
    assert linked == batch.sessions and len(set(linked.values())) == 3

    # resumed: the stopped problems go on in their own sessions, the killed one's row is kept (not run again)
    monkeypatch.setenv("LANE_SLOW_ENDS", "1")
    stored = load_batch(store, batch.batch_id)
    assert stored.kept == [] and list(stored.finished_after) == [1] and stored.to_resume == {0: first, 2: third}
    killed_events = len(store.events(killed))
    report = LaneBatch.resuming(stored, store).run()
    assert [r["status"] for r in report["problems"]] == ["correct", "error", "incorrect", "correct"]
    assert report["complete"] and [report["problems"][i]["session_id"] for i in (0, 2)] == [first, third]
    assert report["problems"][1] == lost and report["fast_p"]["eager"]["0"] == 0.5
    for sid in (first, third):
        assert store.session(sid)["status"] == "completed"
        assert any(c.action == "resume_session" for c in _events(store, sid, ev.ControlChanged))
    assert len(store.events(killed)) == killed_events and len(store.sessions(kind="optimize")) == 4


@pytest.mark.parametrize("flags, lanes, workers", [
    (["--workers", "2"], 2, 1),  # two problems at once, one worker each
    (["--workers", "1"], 1, "1"),
    (["--workers", "2", "--ray", "local"], 1, "2"),  # Ray's workers are one problem's pool
])
def test_the_cli_runs_as_many_problems_at_once_as_workers_asked_for(flags, lanes, workers, monkeypatch, tmp_path):
    from autokernel.engine.commands import kernelbench as command

    args = cli.build_parser().parse_args(["kernelbench", str(HERE / "kernelbench_problems" / "level1"), "--device",
                                          "cpu", "--db", str(tmp_path / "s.db"), *flags])
    batch, n = command._new_batch(args)
    assert type(batch) is (LaneBatch if lanes > 1 else KernelBenchBatch)
    assert (batch.lanes, batch.config.lanes, batch.config.workers, n) == (lanes, lanes, workers, 6)
    assert batch.report()["lanes"] == lanes


@pytest.mark.timeout(300)
def test_a_lane_keeps_its_child_for_its_next_problem(tmp_path, monkeypatch):
    """Five quick problems on two lanes run in two child processes, not five: a lane's child stays up between
    its problems (no fresh imports and cold caches per problem) and leaves once the batch is done."""
    folder = tmp_path / "problems"
    folder.mkdir()
    for k in range(5):
        (folder / f"{k + 1}_good.py").write_text(PROBLEM_SRC)
    monkeypatch.setattr(kernelbench_lanes, "CHILD", (sys.executable, str(HERE / "kernelbench_lane_child.py")))
    monkeypatch.setenv("LANE_SPECS", str(tmp_path))
    store = Store(tmp_path / "s.db")
    config = BatchConfig(device="cpu", max_experiments=2, command="autokernel kernelbench X", lanes=2)
    batch = LaneBatch(discover([folder])[0], config, store)
    report = batch.run()
    assert [r["status"] for r in report["problems"]] == ["correct"] * 5 and report["complete"]
    pids = {store.session(sid)["pid"] for sid in batch.sessions.values()}
    assert len(batch.sessions) == 5 and len(pids) == 2 and os.getpid() not in pids
    assert batch._children == {}  # every lane closed its child
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _lane_child(tmp_path):
    import subprocess

    env = dict(os.environ, LANE_SPECS=str(tmp_path))
    env.pop("LANE_SLOW_ENDS", None)
    return subprocess.Popen((sys.executable, str(HERE / "kernelbench_lane_child.py")), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)


@pytest.mark.timeout(300)
def test_a_lane_child_leaves_when_its_parent_is_gone_and_ends_cleanly_when_told_there_is_no_more(tmp_path):
    import json

    idle = _lane_child(tmp_path)
    assert json.loads(idle.stdout.readline()) == {"ready": True}
    idle.stdin.close()  # the lane had nothing for it
    assert idle.wait(timeout=60) == 0

    (tmp_path / "1_slow.py").write_text(PROBLEM_SRC)
    busy = _lane_child(tmp_path)
    assert json.loads(busy.stdout.readline()) == {"ready": True}
    request = {"db": str(tmp_path / "s.db"), "name": "1_slow", "path": str(tmp_path / "1_slow.py"), "resume": None,
               "config": {"device": "cpu", "max_experiments": 3, "command": "x"}}
    busy.stdin.write(json.dumps(request) + "\n")
    busy.stdin.flush()
    assert "session" in json.loads(busy.stdout.readline())  # its problem runs (until stopped: it is slow)
    busy.stdin.close()  # the parent is gone
    assert busy.wait(timeout=60) == kernelbench_lanes.ORPHANED
