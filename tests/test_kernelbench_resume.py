"""A KernelBench batch stopped (Ctrl-C) part-way goes on with `KernelBenchBatch.resuming(load_batch(...))`:
finished problems kept, the cut one resumed from its own session, the rest run, and the same score as a
batch that never stopped. The real batch, store and `OptimizeSession`s with the loop's doubles (fake
profiler, worker, agent; the KernelBench check answered from the problem's name, as in
test_tui_kernelbench). The SIGKILL of the real CLI is tests/test_kernelbench_kill.py."""

from __future__ import annotations

import threading
import time

import pytest

from autokernel.engine import cli
from autokernel.engine import events as ev
from autokernel.engine.errors import UserError
from autokernel.engine.kernelbench import BatchConfig, KernelBenchBatch, discover
from autokernel.engine.kernelbench_resume import load_batch
from autokernel.engine.store import Store

from loop_doubles import PROBLEM_SRC, batch_session_factory, install_fake_specs

NAMES = ["1_good.py", "2_good.py", "3_cumsum.py", "4_wrong.py"]  # correct, correct, skipped, incorrect
PER_PROBLEM = 5


_factory = batch_session_factory(delay_s=0.1)


@pytest.fixture
def problems(tmp_path, monkeypatch):
    install_fake_specs(monkeypatch, tmp_path, kinds=("fakesoft",))
    for name in NAMES:
        (tmp_path / name).write_text(PROBLEM_SRC)
    return discover([tmp_path])[0]


def _config(api_base=None):
    return BatchConfig(device="cpu", max_experiments=PER_PROBLEM, api_base=api_base, command="autokernel kernelbench X")


def _events(store, sid, cls=ev.Event):
    return [e for _, e in store.events(sid) if isinstance(e, cls)]


def _run_until(batch, store, index, experiments):
    """Run the batch on a thread and stop it (as Ctrl-C does) once problem `index` has run `experiments`."""
    job = threading.Thread(target=batch.run)
    job.start()
    deadline = time.time() + 60
    while time.time() < deadline:
        sid = batch.sessions.get(index)
        if sid and len(_events(store, sid, ev.Decision)) >= experiments:
            break
        time.sleep(0.02)
    batch.stop()
    job.join(60)
    assert not job.is_alive()


def _score(report):
    """What the table and --json say, less what differs run to run (session ids, seconds)."""
    rows = [{k: v for k, v in r.items() if k not in ("session_id", "seconds")} for r in report["problems"]]
    return {**{k: v for k, v in report.items() if k not in ("problems", "batch_session")}, "problems": rows}


def test_stopped_twice_then_resumed_the_batch_ends_as_one_that_never_stopped(tmp_path, problems):
    whole = KernelBenchBatch(problems, _config(), Store(tmp_path / "whole.db"), session_factory=_factory).run()
    assert [r["status"] for r in whole["problems"]] == ["correct", "correct", "skipped", "incorrect"]

    store = Store(tmp_path / "s.db")
    first = KernelBenchBatch(problems, _config(), store, session_factory=_factory)
    _run_until(first, store, index=1, experiments=2)
    assert [r.status for r in first.results] == ["correct", "stopped"]
    bid = first.batch_id
    assert store.session(bid)["status"] == "stopped"
    done_events = len(store.events(first.results[0].session_id))
    cut = first.results[1].session_id
    cut_before = store.events(cut)

    stored = load_batch(store, bid)
    assert [r.name for r in stored.kept] == ["1_good"] and stored.to_resume == {1: cut}
    assert stored.config.max_experiments == PER_PROBLEM and stored.config.command == "autokernel kernelbench X"
    seen = []
    second = KernelBenchBatch.resuming(stored, store, session_factory=_factory, on_start=lambda i, p: seen.append(i))
    assert second.batch_id == bid and [r.status for r in second.results] == ["correct"]  # shown before it runs
    _run_until(second, store, index=2, experiments=0)  # Ctrl-C again, in the resumed batch
    assert seen[0] == 1 and store.session(bid)["status"] == "stopped"
    assert [r.status for r in second.results][:2] == ["correct", "correct"]

    third = KernelBenchBatch.resuming(load_batch(store, bid[:-1]), store, session_factory=_factory)
    report = third.run()
    assert _score(report) == _score(whole)  # the table and fast_p a batch that never stopped prints
    assert report["batch_session"] == bid and report["complete"] and report["counted"] == 4

    # the first problem never ran again; the cut one went on in its own session, nothing repeated
    assert len(store.events(first.results[0].session_id)) == done_events
    assert report["problems"][1]["session_id"] == cut and store.session(cut)["status"] == "completed"
    after = store.events(cut)
    assert [(s, e.payload()) for s, e in after[:len(cut_before)]] == [(s, e.payload()) for s, e in cut_before]
    assert [c.experiment for c in _events(store, cut, ev.CandidateWritten)] == list(range(1, PER_PROBLEM + 1))
    assert len(_events(store, cut, ev.ProfileReady)) == 1
    assert any(c.action == "resume_session" for c in _events(store, cut, ev.ControlChanged))
    # one optimize session per problem, and one batch session holding the score
    assert len(store.sessions(kind="optimize")) == 4 and len(store.sessions(kind="kernelbench")) == 1
    row = store.session(bid)
    assert row["status"] == "completed" and row["summary"] == report
    assert len(_events(store, bid, ev.SessionStarted)) == 1
    assert [c.value for c in _events(store, bid, ev.ControlChanged)] == [bid, bid]


def test_a_problem_whose_session_ended_before_the_batch_counted_it_is_read_not_run(tmp_path, problems):
    """Killed between a problem's session ending and the batch writing its row: the row is made from the store."""
    store = Store(tmp_path / "s.db")
    batch = KernelBenchBatch(problems, _config(), store, session_factory=_factory)
    whole = batch.run()
    bid, first_two = batch.batch_id, [r.session_id for r in batch.results[:2]]
    counts = [len(store.events(sid)) for sid in first_two]
    linked = next(s for s, e in store.events(bid) if isinstance(e, ev.ProblemStarted) and e.index == 1)
    with store.db.conn:  # as the store read when the process died, right after the second session completed
        store.db.execute("DELETE FROM events WHERE session_id=? AND seq>?", [bid, linked])
        store.db.execute("UPDATE sessions SET status='running', pid=0 WHERE id=?", [bid])
        for r in batch.results[2:]:  # not started yet at that moment
            store.db.execute("DELETE FROM events WHERE session_id=?", [r.session_id])
            store.db.execute("DELETE FROM sessions WHERE id=?", [r.session_id])
    stored = load_batch(store, "latest")  # the newest batch, though its problems' sessions are newer
    assert stored.batch_id == bid and len(stored.kept) == 1 and stored.to_resume == {1: first_two[1]}
    report = KernelBenchBatch.resuming(stored, store, session_factory=_factory).run()
    assert _score(report) == _score(whole)
    assert [r["session_id"] for r in report["problems"][:2]] == first_two
    assert [len(store.events(sid)) for sid in first_two] == counts  # neither ran again
    assert len(store.sessions(kind="optimize")) == 4  # the third and fourth ran, once each


def test_what_cannot_be_resumed_is_refused_in_one_line(tmp_path, problems, capsys):
    db = tmp_path / "s.db"
    store = Store(db)
    batch = KernelBenchBatch(problems[:1], _config(api_base="http://user:pw@127.0.0.1:9/v1?key=k"), store,
                             session_factory=_factory)
    batch.stop()  # stopped before its first problem
    report = batch.run()
    assert store.session(batch.batch_id)["config"]["api_base"] == "http://127.0.0.1:9/v1"  # no secret stored
    with pytest.raises(UserError, match=r"asked the server at http://127.0.0.1:9/v1; resume it with --api-base"):
        load_batch(store, batch.batch_id)
    with pytest.raises(UserError, match="ran on cpu; resume it with --device cpu"):
        load_batch(store, batch.batch_id, api_base="http://127.0.0.1:9/v1", device="cuda")
    assert report["api_base"] == "http://127.0.0.1:9/v1" and not report["complete"]
    done = KernelBenchBatch(problems[2:3], _config(), store, session_factory=_factory)
    done.run()
    optimize_id = done.results[0].session_id

    def cli_error(*args):
        code = cli.main(["kernelbench", *args, "--db", str(db)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        return err

    assert f"session {optimize_id} is a optimize session, not a KernelBench batch (resume it with: autokernel " \
           f"optimize --headless --resume {optimize_id})" in cli_error("--resume", optimize_id)
    assert "no session 'nope'" in cli_error("--resume", "nope")
    assert f"batch {done.batch_id} is complete: nothing to resume" in cli_error("--resume", done.batch_id)
    assert f"--api-base {'http://127.0.0.1:9/v1'}" in cli_error("--resume", batch.batch_id)
    assert "leave out PATH, --agent, --max-experiments-per-problem" in cli_error(
        "--resume", batch.batch_id, str(tmp_path), "--agent", "playbook", "--max-experiments-per-problem", "3")
    assert "give problem files or folders (PATH...), or --resume BATCH_SESSION" in cli_error()
    with store.db.conn:  # a batch written before batches could be resumed: no problem names in its config
        store.db.execute("UPDATE sessions SET config=json_remove(config, '$.names') WHERE id=?", [batch.batch_id])
    assert "could not resume batches" in cli_error("--resume", batch.batch_id)


def test_latest_and_a_shared_prefix_mean_the_batch(tmp_path):
    store = Store(tmp_path / "s.db")
    for sid, kind in (("20260101-000000-aaaa", "kernelbench"), ("20260101-000000-bbbb", "optimize")):
        store.create_session(ev.SessionStarted(kind=kind), session_id=sid)
        time.sleep(0.01)
    assert store.session("latest")["id"] == "20260101-000000-bbbb"
    assert store.session("latest", kind="kernelbench")["id"] == "20260101-000000-aaaa"
    assert store.session("20260101-000000", kind="kernelbench")["id"] == "20260101-000000-aaaa"
    assert store.session("20260101-000000-b", kind="kernelbench")["kind"] == "optimize"  # the caller says what it is
    with pytest.raises(UserError, match="ambiguous"):
        store.session("20260101-000000")
    with pytest.raises(UserError, match="no profile session"):
        store.session("latest", kind="profile")
