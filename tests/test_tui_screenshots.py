"""The screenshots tool (`python -m tools.screenshots`, run from the repository root): real SVGs of the
live, replay and sessions screens from a stored session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tui_support import stored_session

ROOT = Path(__file__).resolve().parents[1]  # where `python -m tools.screenshots` runs


def test_screenshots_script_writes_the_screens(tmp_path):
    db = tmp_path / "s.db"
    stored_session(db, experiments=8, approval="ask")
    out = tmp_path / "shots"
    run = subprocess.run([sys.executable, "-m", "tools.screenshots", "--db", str(db), "--session", "latest",
                          "--out", str(out)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    names = sorted(p.name for p in out.glob("*.svg"))
    assert names == ["live-120x40.svg", "live-80x24.svg", "replay-120x40.svg", "replay-80x24.svg",
                     "replay-failure-120x40.svg", "sessions.svg"]
    live = (out / "live-120x40.svg").read_text()
    assert "<svg" in live and "Approve" in live and "harness" in live
    compact = (out / "live-80x24.svg").read_text()
    assert "Quit" in compact and "Help" in compact  # the footer's keys fit an SSH terminal
    assert "synthetic-8-7" in (out / "sessions.svg").read_text().replace("&#160;", " ")


def test_screenshots_script_bad_session_is_one_line(tmp_path):
    db = tmp_path / "s.db"
    stored_session(db, experiments=2)
    run = subprocess.run([sys.executable, "-m", "tools.screenshots", "--db", str(db), "--session", "nope",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "no session 'nope'" in run.stderr
