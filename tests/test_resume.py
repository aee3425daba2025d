"""Nothing lost: a session killed with SIGKILL (or stopped) resumes from the store where it left off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.errors import UserError
from autokernel.engine.search_state import SearchState
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.store import Store

from loop_doubles import EndlessAgent, FakeWorker, fake_profiler, install_fake_specs

HERE = Path(__file__).parent

# A session process with the loop's test doubles (slow fake harness), driven like the CLI would.
DRIVER = textwrap.dedent("""
    import sys, types
    sys.path.insert(0, {here!r})
    from pathlib import Path
    from loop_doubles import EndlessAgent, FakeWorker, fake_profiler, install_fake_specs
    from autokernel.engine.session import OptimizeSession, SessionConfig
    from autokernel.engine.store import Store

    class MP:  # the one monkeypatch call install_fake_specs makes
        def setattr(self, obj, name, value):
            setattr(obj, name, value)

    tmp = Path({tmp!r})
    install_fake_specs(MP(), tmp)
    resume = sys.argv[1] if len(sys.argv) > 1 else None
    config = SessionConfig(model_path=str(tmp / "model.py"), device="cpu", integrate=False,
                           max_experiments=12, plateau=50, resume=resume)
    session = OptimizeSession(config, Store(tmp / "s.db"), agent=EndlessAgent(), worker=FakeWorker(delay_s=0.25),
                              profiler=fake_profiler())
    print(session.run()["status"], flush=True)
""")


def _events(store, sid, cls):
    return [e for _, e in store.events(sid) if isinstance(e, cls)]


def _fake_store(monkeypatch, tmp_path, **specs):
    """The fake kernel specs installed (`specs`: install_fake_specs' options), tmp_path/model.py, and the store."""
    install_fake_specs(monkeypatch, tmp_path, **specs)
    (tmp_path / "model.py").write_text("# fake\n")
    return Store(tmp_path / "s.db")


def _fake_session(tmp_path, store, listeners=(), worker=None, profiler=None, **config):
    """An in-process session on the fake specs and tmp_path/model.py (the fake profiler never reads it),
    with the endless agent: it runs until stopped or out of `max_experiments`."""
    cfg = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, plateau=50, **config)
    return OptimizeSession(cfg, store, listeners, agent=EndlessAgent(), worker=worker or FakeWorker(),
                           profiler=profiler or fake_profiler())


def _wait_for(predicate, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_sigkill_mid_run_then_resume_loses_nothing(tmp_path):
    (tmp_path / "model.py").write_text("# fake\n")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(here=str(HERE), tmp=str(tmp_path)))
    env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, str(driver)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = tmp_path / "s.db"
    try:
        opened = {}

        def mid_experiment():
            if not db.exists():
                return False
            store = opened.setdefault("store", Store(db))
            rows = store.sessions()
            if not rows:
                return False
            sid = rows[0]["id"]
            written = _events(store, sid, ev.CandidateWritten)
            decided = {d.candidate_id for d in _events(store, sid, ev.Decision)}
            # kill while an experiment is under way: written, some stages run, not yet decided
            return len(written) >= 4 and written[-1].candidate_id not in decided
        assert _wait_for(mid_experiment, timeout=240), proc.stderr.read().decode()[-2000:] if proc.poll() is not None else "timeout"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    store = Store(db)
    sid = store.sessions()[0]["id"]
    assert store.session(sid)["status"] == "interrupted"
    before = store.events(sid)
    n_before = len(_events(store, sid, ev.CandidateWritten))
    unfinished = _events(store, sid, ev.CandidateWritten)[-1].candidate_id

    out = subprocess.run([sys.executable, str(driver), sid], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "completed", out.stderr[-2000:]
    after = store.events(sid)
    assert [(s, e.type, e.payload()) for s, e in after[: len(before)]] == [(s, e.type, e.payload()) for s, e in before]
    written = _events(store, sid, ev.CandidateWritten)
    numbers = [c.experiment for c in written]
    assert numbers == list(range(1, 13)) and len(written) > n_before  # continued, no duplicate numbers
    assert len({c.candidate_id for c in written}) == len(written)
    decisions = [d for d in _events(store, sid, ev.Decision) if d.candidate_id == unfinished]
    assert len(decisions) == 1  # the experiment cut short was finished after the resume, once
    assert len(_events(store, sid, ev.SessionStarted)) == 1
    assert any(c.action == "resume_session" for c in _events(store, sid, ev.ControlChanged))
    assert store.session(sid)["status"] == "completed"


def test_an_experiment_cut_at_the_cap_is_finished_behind_a_row_of_no_kernel_type(tmp_path, monkeypatch):
    """Seen in a soak: the profile's top row was of no kernel type (the placeholder of the subgraph targets,
    which is first in the walk) and a stop cut the last experiment the cap allowed; the resume found the budget
    spent at the placeholder, ended the walk there and never finished the cut experiment behind it."""
    import sqlite3

    store = _fake_store(monkeypatch, tmp_path, kinds=("fakesoft",))

    class SeedTuningAgent(EndlessAgent):
        tunes_seeds = True  # as both real agents: the walk gets the placeholder of rows of no kernel type

    def make(resume=None):
        cfg = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, plateau=50,
                            max_experiments=3, resume=resume)
        return OptimizeSession(cfg, store, agent=SeedTuningAgent(), worker=FakeWorker(),
                               profiler=fake_profiler(kinds=("fakesoft",)))

    first = make()
    assert first.run()["status"] == "completed"
    sid = first.session_id
    cut = _events(store, sid, ev.CandidateWritten)[-1]
    assert cut.experiment == 3
    # the store as a SIGKILL mid-experiment leaves it: the last experiment written, one stage run, no decision
    seqs = [s for s, e in store.events(sid) if isinstance(e, ev.StageResult) and e.candidate_id == cut.candidate_id]
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute("DELETE FROM events WHERE session_id = ? AND seq > ?", (sid, seqs[0]))
        db.execute("UPDATE sessions SET status = 'interrupted', summary = NULL WHERE id = ?", (sid,))
    assert SearchState.from_events(sid, store.iter_events(sid)).targets["fakesoft"].unfinished()

    summary = make(resume=sid).run()
    assert summary["status"] == "completed" and summary["experiments"] == 3
    decided = [d for d in _events(store, sid, ev.Decision) if d.candidate_id == cut.candidate_id]
    assert len(decided) == 1  # finished on resume, within the cap it counted in, and nothing new started
    assert [c.experiment for c in _events(store, sid, ev.CandidateWritten)] == [1, 2, 3]


def test_resume_a_stopped_session_in_process_continues_the_search(tmp_path, monkeypatch):
    store = _fake_store(monkeypatch, tmp_path)

    def make(resume=None, listeners=()):
        return _fake_session(tmp_path, store, listeners, max_experiments=10, resume=resume)

    first = make(listeners=[lambda e: isinstance(e, ev.Decision) and e.candidate_id.endswith("0004") and first.stop()])
    assert first.run()["status"] == "stopped"
    sid = first.session_id
    folded = SearchState.from_events(sid, store.iter_events(sid))
    assert folded.experiments == 4 and folded.targets["fakesoft"].best is not None
    best_before = folded.targets["fakesoft"].best.kernel_ms

    second = make(resume=sid[:10])
    summary = second.run()
    assert second.session_id == sid and summary["status"] == "completed" and summary["experiments"] == 10
    state = SearchState.from_events(sid, store.iter_events(sid))
    assert state.targets["fakesoft"].best.kernel_ms < best_before  # the search went on from its best
    assert len(_events(store, sid, ev.ProfileReady)) == 1  # not profiled twice
    # a completed session resumed with a larger budget goes on where the budget cut it
    third = _fake_session(tmp_path, store, max_experiments=14, resume=sid)
    assert third.run()["experiments"] == 14
    numbers = [c.experiment for c in _events(store, sid, ev.CandidateWritten)]
    assert numbers == list(range(1, 15))
    reopened = [c.value for c in _events(store, sid, ev.ControlChanged) if c.action == "reopen_target"]
    assert reopened == ["fakesoft"]
    with pytest.raises(UserError, match="no session"):
        make(resume="nope").run()


# The same through the real CLI, worker, profiler and agent: see
# tests/test_search.py::test_headless_llama_session_killed_resumed_integrated_exported; for a whole-problem
# target with the LLM agent, tests/test_problem_resume.py


def test_a_session_that_asked_a_server_is_not_resumed_without_it(tmp_path, monkeypatch):
    """--api-base is kept without user:password and query, to name it: a resume that forgot it would send the
    LLM agent to its provider's default server instead."""
    store = _fake_store(monkeypatch, tmp_path)
    url = "http://bob:hunter22@127.0.0.1:8000/v1?api-key=abcdef"

    def make(resume=None, api_base=None, listeners=()):
        return _fake_session(tmp_path, store, listeners, max_experiments=4, resume=resume, api_base=api_base)

    first = make(api_base=url, listeners=[lambda e: isinstance(e, ev.Decision) and first.stop()])
    assert first.run()["status"] == "stopped"
    sid = first.session_id
    assert store.session(sid)["config"]["api_base"] == "http://127.0.0.1:8000/v1"
    n_events = len(store.events(sid))
    with pytest.raises(UserError, match=r"asked the server at http://127\.0\.0\.1:8000/v1; resume it with --api-base"):
        make(resume=sid).run()
    assert len(store.events(sid)) == n_events and store.session(sid)["status"] == "stopped"  # left as it was
    assert make(resume=sid, api_base=url).run()["status"] == "completed"
    for path in tmp_path.glob("s.db*"):
        assert b"hunter22" not in path.read_bytes() and b"abcdef" not in path.read_bytes()


def test_listeners_of_a_resumed_session_catch_up_first(tmp_path, monkeypatch):
    store = _fake_store(monkeypatch, tmp_path)
    first = _fake_session(tmp_path, store,
                          [lambda e: isinstance(e, ev.Decision) and e.candidate_id.endswith("0003") and first.stop()],
                          max_experiments=5)
    assert first.run()["status"] == "stopped"
    sid = first.session_id
    stored = [(e.type, e.payload()) for _, e in store.events(sid)]
    seen = []
    second = _fake_session(tmp_path, store, [seen.append], max_experiments=5, resume=sid)
    second.run()
    assert [(e.type, e.payload()) for e in seen[: len(stored)]] == stored
    assert seen[len(stored)].type == "control" and seen[len(stored)].action == "resume_session"
    assert [(e.type, e.payload()) for e in seen] == [(e.type, e.payload()) for _, e in store.events(sid)]


def test_a_run_cut_between_screening_and_the_full_check_keeps_nothing_unchecked(tmp_path, monkeypatch):
    """Cut after a faster candidate was screened (one dtype) and timed: the resumed run checks it in
    every dtype before keeping it."""
    import torch

    store = _fake_store(monkeypatch, tmp_path, kinds=("fakesoft",), dtypes=(torch.float32, torch.bfloat16))

    def make(worker, resume=None):
        return _fake_session(tmp_path, store, worker=worker, profiler=fake_profiler(kinds=("fakesoft",)),
                             max_experiments=3, resume=resume)

    class CutWorker(FakeWorker):
        def check(self, path, *a, dtypes=None, **kw):
            if Path(path).name == "fakesoft-0002.py" and not dtypes:
                raise KeyboardInterrupt  # Ctrl-C as the full check of a faster, screened candidate starts
            return super().check(path, *a, dtypes=dtypes, **kw)

    first_worker = CutWorker()
    first = make(first_worker)
    assert first.run()["status"] == "stopped"  # Ctrl-C ends a run as stopped, resumable
    sid = first.session_id
    c = SearchState.from_events(sid, store.iter_events(sid)).candidate("fakesoft-0002")
    assert c.bench is not None and c.decision is None and c.passed and not c.fully_checked
    assert first_worker.check_dtypes == [[], ["fp32"]]

    worker = FakeWorker()
    make(worker, resume=sid).run()
    assert list(zip(worker.checked, worker.check_dtypes))[0] == ("fakesoft-0002.py", [])  # the full check first
    state = SearchState.from_events(sid, store.iter_events(sid))
    c = state.candidate("fakesoft-0002")
    assert c.decision == "kept" and c.fully_checked
    assert len([b for b in _events(store, sid, ev.BenchResult) if b.candidate_id == "fakesoft-0002"]) == 1


def test_optimize_resume_latest_means_the_newest_optimize_session_and_a_batch_is_pointed_elsewhere(tmp_path, monkeypatch):
    store = _fake_store(monkeypatch, tmp_path)

    def make(resume=None, listeners=()):
        return _fake_session(tmp_path, store, listeners, max_experiments=3, resume=resume)

    first = make(listeners=[lambda e: isinstance(e, ev.Decision) and first.stop()])
    assert first.run()["status"] == "stopped"
    time.sleep(0.01)
    batch = store.create_session(ev.SessionStarted(kind="kernelbench"))  # a newer batch
    assert make(resume="latest").run()["status"] == "completed"  # the optimize session, not the batch
    assert store.session(first.session_id)["status"] == "completed"
    with pytest.raises(UserError, match=f"autokernel kernelbench --resume {batch}"):
        make(resume=batch).run()


def test_the_approval_mode_and_a_skip_set_during_a_run_survive_its_resume(tmp_path, monkeypatch):
    """`m` in the TUI is only a ControlChanged event; a resume without --approval runs in the mode the
    session was last in (a new best waits), a resume that names another mode records it, and a skip that a
    stop got to first is taken when the session goes on."""
    store = _fake_store(monkeypatch, tmp_path)

    def ask_then_stop(e):
        if isinstance(e, ev.Decision) and e.candidate_id.endswith("0002"):
            first.set_approval("ask")
            first.stop()

    first = _fake_session(tmp_path, store, [ask_then_stop], max_experiments=12)
    assert first.run()["status"] == "stopped"
    sid = first.session_id
    assert store.session(sid)["config"]["approval"] == "auto"  # the toggle lives only as an event

    asked = []

    def approve(e):
        if isinstance(e, ev.AwaitingApproval):
            asked.append(e.candidate_id)
            second.approve(e.candidate_id)

    second = _fake_session(tmp_path, store, [approve], max_experiments=8, resume=sid)
    assert second.run()["status"] == "completed"
    resumed_at = next(i for i, (_, e) in enumerate(store.events(sid))
                      if isinstance(e, ev.ControlChanged) and e.action == "resume_session")
    after = [e for _, e in store.events(sid)[resumed_at:]]
    kept = [e for e in after if isinstance(e, ev.Decision) and e.decision == "kept"]
    assert asked and kept and all(d.by == "user" and d.candidate_id in asked for d in kept)

    third = _fake_session(tmp_path, store, max_experiments=12, approval="auto", resume=sid)
    assert third.run()["status"] == "completed" and not third.pending_approval
    modes = [c.value for c in _events(store, sid, ev.ControlChanged) if c.action == "approval"]
    assert modes == ["ask", "auto"]
    assert SearchState.from_events(sid, store.iter_events(sid)).approval == "auto"

    def skip_then_stop(e):
        if isinstance(e, ev.Decision) and e.candidate_id.endswith("0002"):
            fourth.skip_target()
            fourth.stop()

    fourth = _fake_session(tmp_path, Store(tmp_path / "skip.db"), [skip_then_stop], max_experiments=12)
    assert fourth.run()["status"] == "stopped"
    skip_store = fourth.store
    assert not _events(skip_store, fourth.session_id, ev.TargetDone)  # the stop came first
    _fake_session(tmp_path, skip_store, max_experiments=12, resume=fourth.session_id).run()
    done = _events(skip_store, fourth.session_id, ev.TargetDone)
    assert (done[0].target, done[0].reason) == ("fakesoft", "skipped")
    fakesoft = [c.experiment for c in _events(skip_store, fourth.session_id, ev.CandidateWritten)
                if c.target == "fakesoft"]
    assert max(fakesoft) == 2  # nothing more of the skipped target


def test_a_headless_resume_of_a_session_left_in_ask_without_a_terminal_is_refused(tmp_path, monkeypatch, capsys):
    """It would wait for approvals no one can give; an explicit --approval auto resumes it."""
    import io

    from autokernel.engine.cli import main

    store = Store(tmp_path / "s.db")
    sid = store.create_session(ev.SessionStarted(kind="optimize", approval="auto", config={"approval": "auto"}))
    store.append(sid, ev.ControlChanged(action="approval", value="ask"))
    store.finish_session(sid, "stopped", {})
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code = main(["optimize", "--headless", "--resume", sid, "--db", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 2 and f"session {sid} was left in approval ask" in err and "--approval auto" in err, err
