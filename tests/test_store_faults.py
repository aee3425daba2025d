"""The store when the disk is full or the database is read-only: one clear line, nothing half-written,
`PRAGMA integrity_check` clean, and the session resumed once the database can be written again.

The full disk is real: a 4 MiB tmpfs in a mount namespace of its own (`unshare`), filled by the test
while `autokernel optimize` runs on it; the read-only database is that tmpfs remounted read-only. The
refused writes without a namespace come from SQLite's own `max_page_count`, on real files.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.store import Store, StoreWriteError

from loop_doubles import EndlessAgent, FakeWorker, fake_profiler, install_fake_specs
from tui_support import sync, wait_for

MODEL = ("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
         "        return torch.softmax(x * 2.0, dim=-1)\n\n\ndef get_inputs():\n    return [torch.randn(64, 512)]\n")


def integrity(path: Path) -> str:
    conn = sqlite3.connect(str(path))
    try:
        return ";".join(r[0] for r in conn.execute("PRAGMA integrity_check"))
    finally:
        conn.close()


def started() -> ev.SessionStarted:
    return ev.SessionStarted(kind="optimize", model="m.py", device="cpu", device_name="cpu", agent="playbook",
                             approval="auto", config={"device": "cpu"})


def fill_pages(store: Store) -> None:
    """Let the database grow by no page more (SQLite then answers "database or disk is full")."""
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_refused_write_is_one_line_rolled_back_whole_and_leaves_no_gap(tmp_path):
    store = Store(tmp_path / "s.db")
    sid = store.create_session(started())
    fill_pages(store)
    with pytest.raises(StoreWriteError) as info:
        for i in range(500):
            store.append(sid, ev.Log(level="info", message=f"{i} " + "x" * 3000))
    assert "\n" not in str(info.value) and "database or disk is full; free some space" in str(info.value)
    assert str(tmp_path / "s.db") in str(info.value)
    kept = store.events(sid)
    store.db.execute("PRAGMA max_page_count = 1073741823")  # room again
    store.append(sid, ev.Log(level="info", message="after"))
    seqs = [s for s, _ in store.events(sid)]
    assert seqs == list(range(1, len(kept) + 2))  # the refused event left no gap and no half row
    assert store.events(sid)[-1][1].message == "after"
    store.close()
    assert integrity(tmp_path / "s.db") == "ok"


def filling_session(tmp_path, monkeypatch, store: Store, after: int, listeners=(), delay_s: float = 0.0):
    """A session on the loop's doubles whose database can grow no more once `after` experiments are decided."""
    install_fake_specs(monkeypatch, tmp_path)
    (tmp_path / "model.py").write_text("# fake\n")
    decided = []

    def disk_fills(e):
        if isinstance(e, ev.Decision):
            decided.append(e.candidate_id)
            if len(decided) == after:
                fill_pages(store)

    config = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, plateau=50,
                           max_experiments=20)
    return OptimizeSession(config, store, [disk_fills, *listeners], agent=EndlessAgent(),
                           worker=FakeWorker(delay_s=delay_s), profiler=fake_profiler())


def test_a_session_that_cannot_write_stops_with_the_resume_line(tmp_path, monkeypatch):
    store = Store(tmp_path / "s.db")
    session = filling_session(tmp_path, monkeypatch, store, after=3)
    with pytest.raises(StoreWriteError) as info:
        session.run()
    line = str(info.value)
    assert "\n" not in line and "database or disk is full" in line
    assert f"resume it with --resume {session.session_id}" in line
    events = store.events(session.session_id)
    assert not any(isinstance(e, ev.SessionDone) for _, e in events)  # nothing claims it ended
    assert [s for s, _ in events] == list(range(1, len(events) + 1))
    store.close()
    assert integrity(tmp_path / "s.db") == "ok"


@sync
async def test_the_live_screen_shows_the_line_when_the_disk_fills(tmp_path, monkeypatch):
    from autokernel.tui.app import AutokernelApp
    from autokernel.tui.screens.live import EventInbox, LiveScreen

    store = Store(tmp_path / "s.db")
    inbox = EventInbox()
    session = filling_session(tmp_path, monkeypatch, store, after=2, listeners=[inbox.push], delay_s=0.01)
    app = AutokernelApp(store, mode="live", session=session, inbox=inbox)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LiveScreen)
        await wait_for(pilot, lambda: not screen.engine_running, timeout=60)
        await wait_for(pilot, lambda: screen.error is not None)
        assert "database or disk is full" in screen.error and f"--resume {session.session_id}" in screen.error
        assert "\n" not in screen.error and "Traceback" not in screen.error


# -- a real full disk and a real read-only mount ---------------------------------------------------

# Run inside the namespace (its mounts are not seen from outside, /proc/PID/root included): the events of
# a session as (seq, type, candidate id, experiment), and integrity_check's answer.
LEDGER = """
import json, os, sqlite3, sys
if not os.path.exists(sys.argv[1]):
    sys.exit("no database yet")
conn = sqlite3.connect(sys.argv[1], timeout=30)
rows = conn.execute("SELECT seq, type, payload FROM events ORDER BY session_id, seq").fetchall()
print(json.dumps({"integrity": ";".join(r[0] for r in conn.execute("PRAGMA integrity_check")),
                  "events": [(s, t, json.loads(p).get("candidate_id"), json.loads(p).get("experiment"))
                             for s, t, p in rows],
                  "status": [r[0] for r in conn.execute("SELECT status FROM sessions")]}))
"""


class TinyDisk:
    """A tmpfs mounted on `where` in a mount namespace of its own, held open by a sleeping process; every
    command that touches it runs inside that namespace through nsenter."""

    def __init__(self, where: Path, size: str = "4m"):
        self.where = where
        where.mkdir()
        user = [] if os.geteuid() == 0 else ["-U", "-r"]
        self._enter_user = [] if os.geteuid() == 0 else ["-U", "--preserve-credentials"]
        try:
            self.proc = subprocess.Popen(
                ["unshare", *user, "-m", "--propagation", "private", "sh", "-c",
                 f"mount -t tmpfs -o size={size} tmpfs '{where}' && echo ready && exec sleep 3600"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except FileNotFoundError:
            pytest.skip("no unshare on this machine")
        if self.proc.stdout.readline().strip() != "ready":
            why = self.proc.stderr.read().strip()[-200:]
            self.proc.wait()
            pytest.skip(f"cannot mount a tmpfs in a namespace of our own here: {why}")

    def _inside(self, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.proc.pid), *self._enter_user, "-m", "--", *argv]

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self._inside(argv), **kw)

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self._inside(argv), **kw)

    def ledger(self, db: Path) -> dict:
        out = self.run([sys.executable, "-c", LEDGER, str(db)], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    def remount(self, options: str) -> None:
        self.run(["mount", "-o", f"remount,{options}", str(self.where)], check=True)

    def fill(self) -> Path:
        """Write a file until the tmpfs has no byte left."""
        filler = self.where / "filler"
        self.run(["sh", "-c", f"dd if=/dev/zero of='{filler}' bs=64k 2>/dev/null; true"], check=True)
        df = self.run(["df", "--output=avail", str(self.where)], capture_output=True, text=True).stdout.split()
        assert df[-1] == "0", df
        return filler

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def tiny_disk(tmp_path):
    disk = TinyDisk(tmp_path / "disk")
    yield disk
    disk.close()


def _optimize(disk: TinyDisk, tmp_path: Path, *args: str, background: bool = False):
    env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))  # candidates live off the tiny disk
    argv = [sys.executable, "-m", "autokernel.engine.cli", "optimize", "--headless", "--device", "cpu",
            "--no-integrate", "--db", str(disk.where / "s.db"), *args]
    if background:
        return disk.popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL)
    return disk.run(argv, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_a_full_disk_stops_the_engine_with_one_line_and_the_session_resumes_when_space_returns(tiny_disk, tmp_path):
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    db = tiny_disk.where / "s.db"
    proc = _optimize(tiny_disk, tmp_path, str(model), "--max-experiments", "3", background=True)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if any(t == "decision" for _, t, _, _ in tiny_disk.ledger(db)["events"]):
                    break
            except subprocess.CalledProcessError:  # no database yet
                pass
            time.sleep(1)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        filler = tiny_disk.fill()  # the disk is full from the second experiment on
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, (out[-2000:], err[-3000:])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("autokernel optimize: error: cannot write to the session "
                                                   "database"), err[-3000:]
    assert "database or disk is full; free some space" in lines[0]
    sid = lines[0].rsplit("--resume ", 1)[1].split()[0]

    tiny_disk.run(["rm", str(filler)], check=True)  # space returns
    before = tiny_disk.ledger(db)
    assert before["integrity"] == "ok" and before["status"] == ["running"]  # its process gone: interrupted
    resumed = _optimize(tiny_disk, tmp_path, "--resume", sid)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = tiny_disk.ledger(db)
    assert after["integrity"] == "ok" and after["status"] == ["completed"]
    events = after["events"]
    assert events[: len(before["events"])] == before["events"]
    assert [s for s, _, _, _ in events] == list(range(1, len(events) + 1))
    written = [(cid, n) for _, t, cid, n in events if t == "candidate_written"]
    decided = [cid for _, t, cid, _ in events if t == "decision"]
    assert [n for _, n in written] == [1, 2, 3]
    assert sorted(decided) == sorted(cid for cid, _ in written)  # each decided once, none lost


def test_a_read_only_database_is_refused_in_one_line_and_left_untouched(tiny_disk, tmp_path):
    db = tiny_disk.where / "s.db"
    make = ("import sys\nfrom autokernel.engine import events as ev\nfrom autokernel.engine.store import Store\n"
            "s = Store(sys.argv[1])\nsid = s.create_session(ev.SessionStarted(kind='optimize', model='m.py', "
            "device='cpu', device_name='cpu', agent='playbook', approval='auto', config={'device': 'cpu'}))\n"
            "s.append(sid, ev.Log(level='info', message='written before'))\ns.finish_session(sid, 'stopped')\n"
            "s.close()\nprint(sid)\n")
    sid = tiny_disk.run([sys.executable, "-c", make, str(db)], capture_output=True, text=True,
                        check=True).stdout.strip()
    digest = [sys.executable, "-c", "import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], 'rb').read())"
                                    ".hexdigest())", str(db)]
    before = tiny_disk.run(digest, capture_output=True, text=True, check=True).stdout
    tiny_disk.remount("ro")
    proc = _optimize(tiny_disk, tmp_path, "--resume", sid)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert "cannot use the session database" in lines[0] and "it is read-only" in lines[0]
    assert tiny_disk.run(digest, capture_output=True, text=True, check=True).stdout == before
    tiny_disk.remount("rw")
    after = tiny_disk.ledger(db)
    assert after["integrity"] == "ok" and [t for _, t, _, _ in after["events"]] == ["session_started", "log"]
