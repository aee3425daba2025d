"""A pool of workers (`--workers N`): a round's variants run side by side on real worker processes and are
recorded as one worker records them; a worker killed from outside mid-experiment is replaced and the session
completes; a worker that is lost altogether (`WorkerLost`) has its experiment run again on another."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.session_state import fold
from autokernel.engine.store import Store
from autokernel.engine.worker import WorkerLost

from autokernel.tui.app import AutokernelApp
from autokernel.tui.widgets.dashboard import Dashboard
from autokernel.tui.widgets.footer import KeyFooter
from autokernel.tui.widgets.status import StatusLine
from autokernel.tui.widgets.workers import WorkersLine

from loop_doubles import FakeWorker, ScriptedAgent, fake_profiler, install_fake_specs
from tui_support import sync, text_of

TINY = Path(__file__).parent / "data" / "tiny_softmax.py"

REAL_SESSION = pytest.mark.timeout(900)  # real worker processes under Triton's interpreter, on a shared box
EXPERIMENT_EVENTS = (ev.CandidateWritten, ev.StageResult, ev.BenchResult, ev.AwaitingApproval, ev.Decision)


def _optimize(tmp_path: Path, *flags: str) -> subprocess.Popen:
    env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.Popen([sys.executable, "-m", "autokernel.engine.cli", "optimize", str(TINY),
                             "--headless", "--device", "cpu", "--no-integrate", "--db", str(tmp_path / "s.db"), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _stored(db: Path) -> tuple[dict, list[ev.Event]]:
    store = Store(db)
    (row,) = store.sessions()
    return row, list(store.iter_events(row["id"]))


def _by_candidate(events: list[ev.Event]) -> dict[str, list[tuple[int, ev.Event]]]:
    out: dict[str, list[tuple[int, ev.Event]]] = {}
    for i, e in enumerate(events):
        if isinstance(e, EXPERIMENT_EVENTS):
            out.setdefault(e.candidate_id, []).append((i, e))
    return out


def _reads_as_one_workers_experiment(seq: list[ev.Event]) -> None:
    """Written, then each stage running and judged, timed once only if every stage passed, decided once."""
    assert isinstance(seq[0], ev.CandidateWritten) and isinstance(seq[-1], ev.Decision), seq
    stages = [e for e in seq if isinstance(e, ev.StageResult)]
    judged = {e.stage: e.status for e in stages if e.status != "running"}
    assert len(judged) == 5, stages
    benches = [e for e in seq if isinstance(e, ev.BenchResult)]
    assert len(benches) <= 1 and (set(judged.values()) == {"pass"} or not benches), seq
    assert sum(isinstance(e, ev.Decision) for e in seq) == 1


def _both_early_in_a_check(db: Path) -> bool:
    """Whether two experiments are under way on two workers, each running one of the first stages of its
    check (as stored): seconds from its bench, so a worker killed now dies inside a check."""
    if not db.exists() or not Store(db).sessions():
        return False
    _, events = _stored(db)
    busy = {}
    for cid, seq in _by_candidate(events).items():
        if isinstance(seq[-1][1], ev.Decision):
            continue
        stages = [e for _, e in seq if isinstance(e, ev.StageResult)]
        if not (stages and stages[-1].status == "running" and stages[-1].stage in ("smoke", "shape_sweep", "stability")):
            continue
        busy.update({e.worker: cid for e in stages})
    return len(busy) >= 2


def _worker_processes(root: int) -> list[tuple[int, int]]:
    """(minus age, pid) of the worker processes below `root`, oldest first (`ps`, as a user looks)."""
    ps = subprocess.run(["ps", "-e", "-ww", "-o", "etimes=,pid=,ppid=,args="], capture_output=True, text=True)
    rows = [line.split(None, 3) for line in ps.stdout.splitlines()]
    below, found = {root}, []
    for age, pid, ppid, args in sorted(rows, key=lambda r: -int(r[0])):  # parents are older than children
        if int(ppid) in below:
            below.add(int(pid))
            if "autokernel.engine.worker" in args:
                found.append((-int(age), int(pid)))
    return sorted(found)


@REAL_SESSION
def test_two_workers_run_a_rounds_variants_side_by_side(tmp_path):
    proc = _optimize(tmp_path, "--workers", "2", "--max-experiments", "4")
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    row, events = _stored(tmp_path / "s.db")
    assert proc.returncode == 0 and row["status"] == "completed", err[-3000:]
    experiments = _by_candidate(events)
    assert len(experiments) == 4 and row["summary"]["experiments"] == 4
    for seq in experiments.values():
        _reads_as_one_workers_experiment([e for _, e in seq])
    # each experiment ran on one of the two interpreter workers, and the store says which
    ran_on = {cid: {e.worker for _, e in seq if isinstance(e, ev.StageResult)} for cid, seq in experiments.items()}
    assert all(len(w) == 1 for w in ran_on.values()), ran_on
    assert set().union(*ran_on.values()) == {"cpu0", "cpu1"}
    assert {e.worker_device for e in events if isinstance(e, ev.StageResult)} == {"cpu"}
    # side by side: an experiment started on one worker while one written before it, on the other, was undecided
    order = sorted(experiments.items(), key=lambda kv: kv[1][0][0])
    overlapped = [(a, b) for (a, sa), (b, sb) in zip(order, order[1:])
                  if ran_on[a] != ran_on[b] and sb[1][0] < sa[-1][0]]
    assert overlapped, [(cid, [(i, type(e).__name__) for i, e in seq]) for cid, seq in order]
    # the headless lines and the replayed state name the workers
    assert "   workers: cpu0 (cpu): " in out and "; cpu1 (cpu): " in out, out
    assert any(line.startswith("#") and line.rstrip().endswith((" on cpu0", " on cpu1")) for line in out.splitlines())
    replayed = fold(events)
    assert sorted(replayed.workers.workers) == ["cpu0", "cpu1"]
    assert sum(w.done for w in replayed.workers.workers.values()) == 4
    assert {w["worker"]: w["device"] for w in row["summary"]["workers"]} == {"cpu0": "cpu", "cpu1": "cpu"}


@REAL_SESSION
def test_a_worker_killed_mid_experiment_is_replaced_and_the_session_completes(tmp_path):
    proc = _optimize(tmp_path, "--workers", "2", "--max-experiments", "5")
    try:
        deadline = time.monotonic() + 600
        while not (_both_early_in_a_check(tmp_path / "s.db") and _worker_processes(proc.pid)):
            assert proc.poll() is None and time.monotonic() < deadline, "the two workers were never busy at once"
            time.sleep(0.2)
        _, killed = _worker_processes(proc.pid)[0]  # either one is in the middle of a check, not near its bench
        os.kill(killed, signal.SIGKILL)
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    row, events = _stored(tmp_path / "s.db")
    assert proc.returncode == 0 and row["status"] == "completed", err[-3000:] + out[-3000:]
    experiments = _by_candidate(events)
    assert len(experiments) == 5 and all(isinstance(seq[-1][1], ev.Decision) for seq in experiments.values())
    (crash,) = [(i, e) for i, e in enumerate(events) if isinstance(e, ev.StageResult) and e.status == "crash"]
    assert "SIGKILL" in crash[1].detail, crash
    assert experiments[crash[1].candidate_id][-1][1].decision == "failed"
    # the killed worker was replaced: the same worker ran an experiment written after the crash
    later = [e for i, e in enumerate(events) if i > crash[0] and isinstance(e, ev.StageResult)
             and e.worker == crash[1].worker and e.status == "pass"]
    assert later, [(type(e).__name__, getattr(e, "worker", "")) for e in events[crash[0]:]]


# -- the pool's logic, with the loop's doubles -------------------------------------------------------------
class LabelledWorker(FakeWorker):
    """The loop's fake worker with a pool worker's name and device."""

    def __init__(self, label: str, **kw):
        super().__init__(**kw)
        self.label, self.device = label, "cpu"


class LostWorker(LabelledWorker):
    """A worker whose actor (or node) is gone: every call raises WorkerLost."""

    def __init__(self, label: str, **kw):
        super().__init__(label, **kw)
        self.calls = 0

    def check(self, path, kernel, backend, on_stage=None, extra_shapes=None, dtypes=None):
        self.calls += 1
        on_stage and on_stage("smoke", "running", "", 0.0)
        raise WorkerLost(f"the actor of {self.label} died")

    def bench(self, *a, **kw):
        self.calls += 1
        raise WorkerLost(f"the actor of {self.label} died")


def _slower_moves():
    """Every variant slower than the starter (one fails a stage): decisions that no order of arrival changes."""
    return [("slower", [(1.5, ""), (2.0, ""), (1.2, "shape_sweep")]), ("slower still", [(1.3, ""), (1.4, "")]),
            ("slowest", [(3.0, "")])]


def _fake_session(tmp_path, monkeypatch, name: str, worker) -> tuple[Store, str]:
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_specs(monkeypatch, tmp_path, kinds=("fakesoft",))
    store = Store(tmp_path / f"{name}.db")
    config = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, max_experiments=7)
    (tmp_path / "model.py").write_text("# the fake profiler never reads this\n")
    session = OptimizeSession(config, store, agent=ScriptedAgent(moves=_slower_moves()), worker=worker,
                              profiler=fake_profiler(("fakesoft",)))
    session.run()
    return store, session.session_id


def _shape(events: list[ev.Event]) -> tuple[list, dict]:
    """The events with what a pool may change left out (worker names, times, how experiments interleave):
    the session's own events in order, and each experiment's in order."""
    session, experiments = [], {}
    for e in events:
        detail = (type(e).__name__, getattr(e, "stage", ""), getattr(e, "status", ""), getattr(e, "decision", ""),
                  getattr(e, "kernel_ms", None), getattr(e, "target", ""), getattr(e, "reason", ""),
                  getattr(e, "title", ""), getattr(e, "source", ""))
        if isinstance(e, EXPERIMENT_EVENTS):
            experiments.setdefault(e.candidate_id, []).append(detail)
        else:
            session.append(detail)
    return session, experiments


def test_two_workers_record_the_events_one_worker_records(tmp_path, monkeypatch):
    one_store, one = _fake_session(tmp_path, monkeypatch, "one", LabelledWorker("cpu", delay_s=0.05))
    two_store, two = _fake_session(tmp_path, monkeypatch, "two", [LabelledWorker("cpu0", delay_s=0.3),
                                                                  LabelledWorker("cpu1", delay_s=0.3)])
    alone, pooled = list(one_store.iter_events(one)), list(two_store.iter_events(two))
    drop = (ev.SessionStarted, ev.SessionDone, ev.Log)  # ids, paths and seconds differ between any two sessions
    assert _shape([e for e in pooled if not isinstance(e, drop)]) == _shape([e for e in alone if not isinstance(e, drop)])
    assert {e.worker for e in alone if isinstance(e, ev.StageResult)} == {"cpu"}
    assert {e.worker for e in pooled if isinstance(e, ev.StageResult)} == {"cpu0", "cpu1"}
    # in the pool the round's variants overlapped: a variant's stages began before the one before it was decided
    decided = {e.candidate_id: i for i, e in enumerate(pooled) if isinstance(e, ev.Decision)}
    began = {}
    for i, e in enumerate(pooled):
        if isinstance(e, ev.StageResult):
            began.setdefault(e.candidate_id, i)
    assert began["fakesoft-0003"] < decided["fakesoft-0002"], [(type(e).__name__, getattr(e, "candidate_id", ""))
                                                              for e in pooled]


def test_a_lost_worker_is_dropped_and_its_experiment_runs_on_another(tmp_path, monkeypatch):
    lost, kept = LostWorker("ray:gone/gpu0"), LabelledWorker("ray:here/gpu1")
    store, sid = _fake_session(tmp_path, monkeypatch, "lost", [lost, kept])
    events = list(store.iter_events(sid))
    assert store.session(sid)["status"] == "completed"
    assert lost.calls == 1 and lost.closed  # asked once, then dropped from the pool
    (note,) = [e for e in events if isinstance(e, ev.Log) and "lost" in e.message]
    assert note.message.startswith("worker ray:gone/gpu0 (cpu) lost: the actor of ray:gone/gpu0 died; its check "
                                   "runs again on another worker"), note.message
    experiments = _by_candidate(events)
    assert len(experiments) == 7
    for seq in experiments.values():
        _reads_as_one_workers_experiment([e for _, e in seq])
    judged = [e for e in events if isinstance(e, ev.StageResult) and e.status != "running"]
    assert {e.worker for e in judged} == {"ray:here/gpu1"}
    assert not [e for e in judged if e.status == "crash"]  # a lost worker is not the candidate's crash


def test_a_pool_whose_every_worker_is_lost_fails_its_targets_not_the_session(tmp_path, monkeypatch):
    store, sid = _fake_session(tmp_path, monkeypatch, "gone", [LostWorker("ray:a/gpu0"), LostWorker("ray:b/gpu1")])
    events = list(store.iter_events(sid))
    assert store.session(sid)["status"] == "completed"
    assert [e.message for e in events if isinstance(e, ev.ErrorEvent)] == ["WorkerLost: every worker of the pool was lost"]
    assert [(e.target, e.reason) for e in events if isinstance(e, ev.TargetDone)] == [("fakesoft", "failed")]
    assert len([e for e in events if isinstance(e, ev.Log) and " lost: " in e.message]) == 2
    assert not [e for e in events if isinstance(e, ev.Decision)]  # the starter stays undecided: a resume runs it


def test_auto_is_one_worker_per_visible_gpu_each_seeing_only_its_own(monkeypatch):
    from autokernel.engine.errors import UserError
    from autokernel.engine.pool import make_workers, worker_count

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    pool = make_workers("cuda", "auto")
    for w in pool:  # they start at once (on this machine with no GPU they cannot): end them
        w.close()
    assert [(w.label, w.device_id, w.visible_device) for w in pool] == [("gpu2", "cuda:2", "2"), ("gpu5", "cuda:5", "5")]
    assert worker_count("auto", "cpu") == 1 and worker_count("3", "cpu") == 3
    with pytest.raises(UserError, match="--workers 3 needs 3 GPUs and this machine shows 2"):
        worker_count("3", "cuda")
    (one,) = make_workers("cuda", "1")  # one GPU: the worker as it always was, all GPUs visible
    assert (one.label, one.device_id, one.visible_device) == ("cuda", "cuda", None)


def test_ray_without_its_extra_says_how_to_install_it(monkeypatch):
    from autokernel.engine.errors import UserError
    from autokernel.engine.pool import make_workers

    monkeypatch.setitem(sys.modules, "autokernel.engine.ray_workers", None)  # as if Ray were not installed
    with pytest.raises(UserError, match=r"pip install 'autokernel-tui\[ray\]'"):
        make_workers("cpu", "auto", ray="auto")


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "--workers must be a positive number or auto, not '0'"),
    (["--workers", "many"], "--workers must be a positive number or auto, not 'many'"),
    (["--device", "cpu", "--workers", "2.5"], "--workers must be a positive number or auto, not '2.5'"),
])
def test_a_bad_workers_flag_is_one_line(tmp_path, flags, message):
    proc = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "optimize", "--headless", *flags,
                           "--db", str(tmp_path / "s.db")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == f"autokernel optimize: error: {message}", proc.stderr


@pytest.mark.parametrize("workers", [1, 2])
@sync
async def test_replay_at_80x24_shows_a_pools_workers_and_nothing_new_for_one(tmp_path, monkeypatch, workers):
    pool = [LabelledWorker(f"cpu{i}", delay_s=0.05) for i in range(workers)]
    store, sid = _fake_session(tmp_path, monkeypatch, "replay", pool if workers > 1 else pool[0])
    app = AutokernelApp(store, mode="replay", replay=sid)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        line = app.screen.query_one(WorkersLine)
        if workers == 1:
            assert not line.display
            return
        text = text_of(line)
        assert line.display and line.region.height == 1 and text.startswith("workers cpu0 idle ")
        assert " │ cpu1 idle " in text and text.count(" done ") == 2
        done = sum(int(part.split(" done")[0].split()[-1]) for part in text.split("│"))
        assert done == 7  # every experiment, each counted on the worker that ran it
        # the rest of the small layout still fits: the status on top, the footer at the bottom, the log between
        assert app.screen.query_one(StatusLine).region.y == 0
        assert app.screen.query_one(KeyFooter).region.bottom == 24
        assert app.screen.query_one(Dashboard).max_scroll_y == 0
