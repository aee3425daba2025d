"""The session store: round trip, WAL, schema version, and a crash in the middle of writing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from autokernel.engine.errors import UserError
from autokernel.engine.events import BenchResult, Decision, Log, SessionDone, SessionStarted, StageResult
from autokernel.engine.store import SCHEMA_VERSION, Recorder, Store, default_db_path


def test_round_trip_keeps_types_order_and_fields(db_path):
    store = Store(db_path)
    sid = store.create_session(SessionStarted(kind="optimize", model="m.py", device="cpu", config={"budget": 60}))
    seen = []
    rec = Recorder(store, sid, listeners=[seen.append])
    rec.emit(StageResult(candidate_id="c1", stage="smoke", status="pass", detail="ok", seconds=0.5))
    rec.emit(BenchResult(candidate_id="c1", kernel_ms=1.5, eager_ms=3.0, speedup_eager=2.0, shape={"rows": 4}))
    rec.emit(Decision(candidate_id="c1", decision="kept"))
    store.finish_session(sid, "completed", {"experiments": 1})

    again = Store(db_path)  # a second connection sees everything
    events = [e for _, e in again.events(sid)]
    assert [e.type for e in events] == ["session_started", "stage_result", "bench_result", "decision"]
    assert events[2].shape == {"rows": 4} and events[2].speedup_eager == 2.0
    assert [e.type for e in seen] == ["stage_result", "bench_result", "decision"]
    row = again.session(sid)
    assert row["status"] == "completed" and row["summary"] == {"experiments": 1} and row["config"] == {"budget": 60}
    assert again.session("latest")["id"] == sid
    assert again.session(sid[:10])["id"] == sid
    assert [s for _, s in again.events(sid, types=["decision"])][0].decision == "kept"


def test_wal_mode_and_schema_version(db_path):
    Store(db_path)
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)


def test_newer_schema_is_refused_with_a_clear_error(db_path):
    Store(db_path)
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    conn.commit()
    with pytest.raises(UserError, match="newer autokernel"):
        Store(db_path)


def test_not_a_database_is_a_user_error(tmp_path):
    bad = tmp_path / "junk.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UserError, match="not a usable session database"):
        Store(bad)


def test_unknown_session_is_a_user_error(db_path):
    with pytest.raises(UserError, match="no session"):
        Store(db_path).session("nope")


def test_default_path_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOKERNEL_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"
    monkeypatch.delenv("AUTOKERNEL_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_db_path() == tmp_path / "data" / "autokernel" / "sessions.db"


WRITER = textwrap.dedent(
    """
    import sys, time
    from autokernel.engine.store import Store, Recorder
    from autokernel.engine.events import SessionStarted, Log
    store = Store(sys.argv[1])
    sid = store.create_session(SessionStarted(kind="optimize", model="m.py"))
    print(sid, flush=True)
    rec = Recorder(store, sid)
    i = 0
    while True:
        rec.emit(Log(message="x" * 2000 + str(i)))
        i += 1
    """
)


def test_killed_writer_leaves_a_readable_interrupted_session(db_path):
    """SIGKILL in the middle of a stream of writes: every committed event reads back, none half-written."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db_path)], stdout=subprocess.PIPE, text=True)
    sid = proc.stdout.readline().strip()
    deadline = time.time() + 30
    store = Store(db_path)
    while time.time() < deadline and len(store.events(sid)) < 200:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    events = Store(db_path).events(sid)
    assert len(events) >= 200
    seqs = [s for s, _ in events]
    assert seqs == list(range(1, len(seqs) + 1))  # no gaps, no torn rows
    assert all(e.message.startswith("x" * 2000) for _, e in events[1:])
    assert Store(db_path).session(sid)["status"] == "interrupted"
    # the interrupted session can be reopened and appended to (resume)
    s = Store(db_path)
    s.reopen_session(sid)
    seq = s.append(sid, SessionDone(status="completed"))
    assert seq == len(seqs) + 1


def test_processes_opening_a_new_database_together_all_get_it(tmp_path):
    """An engine and a screen (or a test polling the engine) may open a fresh database at once: each
    must find the schema made once, none may fail with 'database is locked' or 'table exists'."""
    db = tmp_path / "new.db"
    opener = textwrap.dedent(f"""
        import time, sys
        from autokernel.engine.events import SessionStarted
        from autokernel.engine.store import Store
        while time.time() < {time.time() + 2.0}:
            pass
        store = Store({str(db)!r})
        store.create_session(SessionStarted(kind="profile", model="m", device="cpu"))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", opener], stderr=subprocess.PIPE, text=True) for _ in range(6)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, "\n".join(e[-800:] for e in errors if e)
    store = Store(db)
    assert len(store.sessions()) == 6
