"""`autokernel ... | head`: a reader that leaves early ends the command quietly (no BrokenPipeError
traceback), while a broken pipe that is not stdout's is still reported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from autokernel.engine import events as ev
from autokernel.engine.store import Recorder, Store

CLI = [sys.executable, "-m", "autokernel.engine.cli"]


@pytest.fixture(scope="module")
def big_db(tmp_path_factory):
    """A real store whose replay and session list are far longer than a pipe's buffer (64 KiB), so the
    command is still writing when `head` has gone (400 sessions made a 55 KB table: on a busy box the
    command could write it all before head left, and end 0)."""
    db = tmp_path_factory.mktemp("pipes") / "s.db"
    store = Store(db)
    for i in range(2000):  # ids of our own: 2000 made in a second would collide in a random 4-hex suffix
        sid = store.create_session(ev.SessionStarted(kind="profile", model="/m/model.py"), f"20260101-000000-{i:04d}")
        store.finish_session(sid, "completed", {"total_ms": 1.0, "top": "RMSNorm"})
    sid = store.create_session(ev.SessionStarted(kind="optimize", model="/m/model.py", device="cpu"))
    rec = Recorder(store, sid)
    for i in range(3000):
        rec.emit(ev.Log(level="info", message=f"line {i} of a long session"))
    store.close()
    return db


@pytest.mark.parametrize("args", [("replay", "latest"), ("sessions",), ("sessions", "--json")])
def test_a_reader_that_leaves_early_ends_the_command_quietly(big_db, args):
    cmd = subprocess.Popen([*CLI, *args, "--db", str(big_db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-n", "1"], stdin=cmd.stdout, capture_output=True, timeout=120)
    cmd.stdout.close()  # only head holds the read end: when it exits, the pipe has no reader
    err = cmd.stderr.read().decode()
    assert cmd.wait(timeout=120) == 1, err  # Python's own exit status on EPIPE, as rich's tables give
    assert head.returncode == 0 and head.stdout.count(b"\n") == 1
    assert err == "", err  # no BrokenPipeError traceback, no "Exception ignored" at exit


def test_a_broken_pipe_that_is_not_stdouts_is_still_an_error(tmp_path):
    """A command whose own pipe (a worker's, say) breaks while stdout is fine fails loudly."""
    script = textwrap.dedent(f"""
        import sys
        from autokernel.engine import cli
        from autokernel.engine.commands import sessions

        def run(args):
            raise BrokenPipeError("the worker's pipe")
        sessions.run = run
        sys.exit(cli.main(["sessions", "--db", {str(tmp_path / "s.db")!r}]))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ))
    assert p.returncode == 1 and "BrokenPipeError: the worker's pipe" in p.stderr, p.stderr
