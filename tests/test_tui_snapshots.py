"""Snapshots of the live, replay and sessions screens (pytest-textual-snapshot).

Every input is fixed: the synthetic session's timestamps, the live screen's clock, the sizes and
the database path, so a snapshot changes only when what the screen draws changes.
Update them after an intended change with `pytest tests/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

from autokernel.engine.store import Store
from autokernel.tui.app import AutokernelApp
from autokernel.tui.screens.live import EventInbox
from autokernel.tui.synthetic import T0, SyntheticSession, write_session

from tui_support import wait_for


def _replay_app(tmp_path, monkeypatch, experiments=12) -> AutokernelApp:
    monkeypatch.chdir(tmp_path)
    store = Store("sessions.db")  # a relative path: the screens show it, and it must not vary
    write_session(store, experiments=experiments)
    return AutokernelApp(store, mode="replay", replay="latest")


def test_replay_screen_large(snap_compare, tmp_path, monkeypatch):
    # step back into the last failed experiment's stages
    assert snap_compare(_replay_app(tmp_path, monkeypatch), terminal_size=(120, 40),
                        press=["left_square_bracket", "left_square_bracket", "right", "right", "right", "right",
                               "right", "right", "right", "right"])


def test_replay_screen_80x24(snap_compare, tmp_path, monkeypatch):
    assert snap_compare(_replay_app(tmp_path, monkeypatch), terminal_size=(80, 24))


def test_replay_screen_full_source(snap_compare, tmp_path, monkeypatch):
    assert snap_compare(_replay_app(tmp_path, monkeypatch), terminal_size=(120, 40), press=["d"])


def test_sessions_screen(snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = Store("sessions.db")
    write_session(store, experiments=12, seed=7)
    write_session(store, experiments=5, seed=9)
    assert snap_compare(AutokernelApp(store, mode="sessions"), terminal_size=(100, 20))


def test_live_screen_waiting_for_approval(snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = Store("sessions.db")
    inbox = EventInbox()
    session = SyntheticSession(store, [inbox.push], experiments=12, approval="ask")
    app = AutokernelApp(store, mode="live", session=session, inbox=inbox, clock=lambda: T0 + 100.0)

    async def until_waiting(pilot):
        await wait_for(pilot, lambda: app.screen.state.pending is not None)
        await pilot.pause(0.2)  # one more tick: the screen has drawn what the engine sent

    assert snap_compare(app, terminal_size=(120, 40), run_before=until_waiting)
