"""Ctrl-C in `autokernel optimize --headless`: the lines it prints give the command that continues the
session, with its id, as the TUI's exit line does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

TINY = Path(__file__).parent / "data" / "tiny_softmax.py"  # one softmax row: the smallest real session


def _as_a_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell does to `cmd &`, nohup and CI runners


def test_ctrl_c_names_the_resume_command_with_the_session_id(tmp_path):
    """Started the way a shell starts a background job (SIGINT ignored), so `kill -INT` must still stop it."""
    db = tmp_path / "s.db"
    env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "autokernel.engine.cli", "optimize", str(TINY),
                             "--headless", "--device", "cpu", "--max-experiments", "3", "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_as_a_background_job)
    try:
        first = proc.stdout.readline()  # printed once the session exists (its id is known from then on)
        assert first.startswith("session started:"), first + proc.stderr.read()[-2000:]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    from autokernel.engine.store import Store

    (row,) = Store(db).sessions()
    resume = f"resume with: autokernel optimize --headless --resume {row['id']}"
    assert proc.returncode == 130 and row["status"] == "stopped", err[-2000:]
    assert err.startswith(f"stopping after the current experiment; then {resume} (Ctrl-C again"), err[-2000:]
    assert f"session {row['id']}: stopped" in out and f"{resume}; export with" in out, out[-2000:]
