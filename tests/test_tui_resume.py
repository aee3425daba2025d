"""Keys that end a live session, and what a resume of it does: the real `OptimizeSession` under the
screen, on the loop's doubles (fake kernels, a fake harness, an agent that always has a faster idea).

`m` (approval ask) then `q` then `--resume`: the next new best waits for `a`. Ctrl-C stops the session
as `q` does (after a confirm, resumable), not Textual's "press ctrl+q" toast.
"""

from __future__ import annotations

from autokernel.engine import events as ev
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.store import Store
from autokernel.tui.app import build_parser, make_app
from autokernel.tui.screens.dialogs import ConfirmQuit
from autokernel.tui.screens.live import LiveScreen
from autokernel.tui.widgets.status import StatusLine

from loop_doubles import EndlessAgent, FakeWorker, fake_profiler, install_fake_specs
from tui_support import sync, text_of, wait_for


def _setup(tmp_path, monkeypatch):
    """The fake specs, a model file, the store, and `app(*flags)`: the app `autokernel-tui` makes from those
    flags (none: a new session of the model), its sessions real OptimizeSessions on the doubles."""
    install_fake_specs(monkeypatch, tmp_path)
    model = tmp_path / "model.py"
    model.write_text("# fake\n")
    db = tmp_path / "s.db"

    def factory(config, inbox):
        cfg = SessionConfig(**config, integrate=False, plateau=50)
        return OptimizeSession(cfg, Store(db), [inbox.push], agent=EndlessAgent(),
                               worker=FakeWorker(delay_s=0.02), profiler=fake_profiler())

    def app(*flags):
        return make_app(build_parser().parse_args([*(flags or [str(model)]), "--db", str(db), "--device", "cpu",
                                                   "--max-experiments", "1000"]), session_factory=factory)

    return app, Store(db)


def _decisions(store: Store, sid: str) -> dict[str, ev.Decision]:
    return {e.candidate_id: e for _, e in store.events(sid, types=["decision"])}


async def _run_then_quit(app, key: str, steer=None) -> str:
    """Run a new session under the screen until it has kept two kernels (the starter and a first new best,
    unasked), `steer(pilot, screen)`, then `key` confirmed with y; the session's id once the engine stopped."""
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LiveScreen)
        await wait_for(pilot, lambda: screen.state.kept >= 2, timeout=60)
        if steer is not None:
            await steer(pilot, screen)
        await _quit_with(pilot, screen, key)
    return app.live_session.session_id


async def _quit_with(pilot, screen: LiveScreen, key: str) -> None:
    """`key`, confirmed with y: the engine finishes its step and stops."""
    await pilot.press(key, "y")
    await wait_for(pilot, lambda: not screen.engine_running, timeout=60)


@sync
async def test_approval_ask_set_with_m_survives_quit_and_resume(tmp_path, monkeypatch):
    app_for, store = _setup(tmp_path, monkeypatch)

    async def ask(pilot, screen):
        await pilot.press("m")
        assert screen.state.approval == "ask"

    sid = await _run_then_quit(app_for(), "q", ask)
    assert store.session(sid)["status"] == "stopped" and store.session(sid)["config"]["approval"] == "auto"

    app = app_for("--resume", sid)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.state.pending is not None, timeout=60)
        assert "approval ask" in text_of(screen.query_one(StatusLine))
        cid = screen.state.pending.candidate_id
        await pilot.pause(0.3)
        assert cid not in _decisions(store, sid) and app.live_session.pending_approval  # it waits for the person
        await pilot.press("a")
        await wait_for(pilot, lambda: cid in _decisions(store, sid), timeout=30)
        assert (_decisions(store, sid)[cid].decision, _decisions(store, sid)[cid].by) == ("kept", "user")
        await _quit_with(pilot, screen, "q")
    assert store.session(sid)["status"] == "stopped"


@sync
async def test_ctrl_c_stops_the_session_after_a_confirm_and_it_resumes(tmp_path, monkeypatch):
    app_for, store = _setup(tmp_path, monkeypatch)

    async def ctrl_c_then_stay(pilot, screen):
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(screen.app.screen, ConfirmQuit) and screen.engine_running
        await pilot.press("n")  # stay: the session goes on
        await pilot.pause()
        assert screen.app.screen is screen and screen.engine_running

    sid = await _run_then_quit(app_for(), "ctrl+c", ctrl_c_then_stay)
    assert store.session(sid)["status"] == "stopped"
    assert [e.action for _, e in store.events(sid, types=["control"])][-1:] == ["stop"]
    done = len([e for _, e in store.events(sid) if isinstance(e, ev.CandidateWritten)])

    resumed = OptimizeSession(SessionConfig(resume=sid, integrate=False, plateau=50, max_experiments=done + 3),
                              store, agent=EndlessAgent(), worker=FakeWorker(), profiler=fake_profiler())
    assert resumed.run()["status"] == "completed"
    numbers = [e.experiment for _, e in store.events(sid) if isinstance(e, ev.CandidateWritten)]
    assert numbers == list(range(1, done + 4))
