"""Snapshots of the live, replay and sessions screens (pytest-textual-snapshot), and the small layout's keys.

Every input is fixed: the synthetic session's timestamps, the live screen's clock, the sizes and
the database path, so a snapshot changes only when what the screen draws changes.
Update them after an intended change with `pytest tests/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

from autokernel.engine.store import Store
from autokernel.tui.app import AutokernelApp
from autokernel.tui.screens.live import EventInbox
from tools.synthetic import LLAMA_ROWS, T0, SyntheticSession, write_session

from textual.widgets._footer import FooterKey

from autokernel.tui.widgets.dashboard import Dashboard
from autokernel.tui.widgets.footer import KeyFooter

from tui_support import sync, wait_for


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
    assert snap_compare(_live_app(tmp_path, monkeypatch), terminal_size=(120, 40), run_before=_until_waiting)

def _live_app(tmp_path, monkeypatch, profile=None) -> AutokernelApp:
    monkeypatch.chdir(tmp_path)
    store = Store("sessions.db")
    inbox = EventInbox()
    session = SyntheticSession(store, [inbox.push], experiments=12, approval="ask", profile=profile)
    return AutokernelApp(store, mode="live", session=session, inbox=inbox, clock=lambda: T0 + 100.0)


async def _until_waiting(pilot, *keys):
    await wait_for(pilot, lambda: pilot.app.screen.state.pending is not None)
    await pilot.pause(0.2)  # one more tick: the screen has drawn what the engine sent
    await pilot.press(*keys)


def test_live_screen_80x24_shows_every_essential_key(snap_compare, tmp_path, monkeypatch):
    """The small layout: table, harness, hypothesis, the code below, and a footer that fits (q Quit, ? Help)."""
    assert snap_compare(_live_app(tmp_path, monkeypatch), terminal_size=(80, 24), run_before=_until_waiting)


def test_live_screen_80x24_events_one_key_away(snap_compare, tmp_path, monkeypatch):
    async def events(pilot):
        await _until_waiting(pilot, "v", "v")

    assert snap_compare(_live_app(tmp_path, monkeypatch), terminal_size=(80, 24), run_before=events)


def test_live_screen_160x48_whole_kind_names_and_hypothesis(snap_compare, tmp_path, monkeypatch):
    """Llama-like kinds (flash_attention, rotary_embedding, cross_entropy) whole, the op names in the room
    left, the hypothesis wrapped rather than cut."""
    assert snap_compare(_live_app(tmp_path, monkeypatch, profile=LLAMA_ROWS), terminal_size=(160, 48),
                        run_before=_until_waiting)


@sync
async def test_at_80x24_the_footer_holds_quit_and_help_and_v_cycles_the_lower_panel(tmp_path, monkeypatch):
    app = _live_app(tmp_path, monkeypatch)
    async with app.run_test(size=(80, 24)) as pilot:
        await _until_waiting(pilot)
        footer = app.screen.query_one(KeyFooter)
        # the footer recomposes its keys on its own turn after the bindings settle (late on a loaded box)
        await wait_for(pilot, lambda: len(footer.query(FooterKey)) > 0, timeout=60)
        keys = {k.key: k.description for k in footer.query(FooterKey)}
        assert keys.get("q") == "Quit" and keys.get("question_mark") == "Help", keys
        assert {"a", "r", "m", "p", "s", "v"} <= set(keys)
        right = max(k.region.right for k in footer.query(FooterKey))
        assert right <= 80  # every key on screen, none cut at the edge
        dash = app.screen.query_one(Dashboard)
        shown = [w.id for w in dash.query("#code, #chart, #log") if w.display]
        assert shown == ["code"]
        await pilot.press("v")
        assert [w.id for w in dash.query("#code, #chart, #log") if w.display] == ["chart"]
        await pilot.press("v")
        assert [w.id for w in dash.query("#code, #chart, #log") if w.display] == ["log"]
        app.screen.session.stop()
