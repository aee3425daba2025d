"""`autokernel-tui --kernelbench`: the problem table over the live dashboard while a batch runs.

The batch is the real `KernelBenchBatch` running real `OptimizeSession`s with the loop's doubles (fake
profiler, worker and agent, as in test_resume); only the KernelBench check is answered from the problem's
name, since the real one is covered end to end in test_kernelbench.
"""

from __future__ import annotations

import pytest

from autokernel.engine.errors import UserError
from autokernel.engine.kernelbench import BatchConfig, KernelBenchBatch, discover
from autokernel.engine.store import Store
from autokernel.tui.app import AutokernelApp, build_parser, make_app
from autokernel.tui.screens.kernelbench import KernelBenchScreen
from autokernel.tui.screens.live import EventInbox
from autokernel.tui.screens.replay import ReplayScreen
from autokernel.tui.widgets.problems import ProblemTable

from loop_doubles import PROBLEM_SRC, batch_session_factory, install_fake_specs
from tui_support import sync, wait_for


def _batch(tmp_path, monkeypatch, names, delay_s=0.0, max_experiments=4):
    install_fake_specs(monkeypatch, tmp_path, kinds=("fakesoft",))
    paths = []
    for name in names:
        (tmp_path / name).write_text(PROBLEM_SRC)
        paths.append(tmp_path / name)
    store = Store(tmp_path / "s.db")
    inbox = EventInbox()
    batch = KernelBenchBatch(discover(paths)[0], BatchConfig(device="cpu", max_experiments=max_experiments), store,
                             listeners=[inbox.push], session_factory=batch_session_factory(delay_s))
    return AutokernelApp(store, mode="kernelbench", session=batch, inbox=inbox), batch, store


def _written(store: Store, session_id: str) -> int:
    """How many candidates a session has written, as the store holds them."""
    return len(store.events(session_id, types=["candidate_written"]))


def _cells(table: ProblemTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


@sync
async def test_the_table_follows_the_batch_and_a_finished_problem_replays(tmp_path, monkeypatch):
    app, batch, store = _batch(tmp_path, monkeypatch, ["1_good.py", "2_wrong.py", "3_cumsum.py", "4_good.py"])
    async with app.run_test(size=(140, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, KernelBenchScreen)
        table = screen.query_one(ProblemTable)
        await wait_for(pilot, lambda: not screen.engine_running, timeout=60)
        await pilot.pause(0.2)  # one more tick draws the end
        rows = _cells(table)
        assert [r[1:5] for r in rows] == [["1_good", "correct", "1.60×", "1.20×"],
                                          ["2_wrong", "incorrect", "1.60×", "1.20×"],
                                          ["3_cumsum", "skipped", "—", "—"],
                                          ["4_good", "correct", "1.60×", "1.20×"]]
        assert "nothing the playbook agent can target" in rows[2][6] and rows[0][5] == "fakesoft"
        assert "4 of 4 done" in str(table.border_title)
        subtitle = str(table.border_subtitle)  # fast_p over the four: 2 correct, both 1.6x eager, 1.2x compile
        assert "fast_p over 4" in subtitle and "vs eager 0:0.50 1.0:0.50 1.5:0.50 2.0:0.00" in subtitle
        assert "vs compile 0:0.50 1.0:0.50 1.5:0.00" in subtitle
        # the dashboard shows the problem run last, from its own session's events only
        assert screen.state.model.endswith("4_good.py") and screen.state.experiments == 4
        assert screen.state.n_events == len(store.events(batch.results[3].session_id))
        # Enter on a finished problem replays its session; q comes back to the batch
        table.focus()
        table.move_cursor(row=1)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen) and app.sub_title == f"replay {batch.results[1].session_id}"
        await pilot.press("q")
        await pilot.pause()
        assert app.screen is screen
    assert store.session(batch.batch_id)["summary"]["fast_p"]["eager"]["1.0"] == 0.5


@sync
async def test_keys_reach_the_problem_under_way_and_quitting_stops_it(tmp_path, monkeypatch):
    app, batch, store = _batch(tmp_path, monkeypatch, ["1_a.py", "2_b.py", "3_c.py"], delay_s=0.05,
                               max_experiments=40)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        table = screen.query_one(ProblemTable)
        await wait_for(pilot, lambda: screen.state.model.endswith("2_b.py") and screen.state.experiments >= 2
                       and [r[2] for r in _cells(table)] == ["correct", "running", "waiting"], timeout=60)
        await pilot.press("p")  # pause reaches the second problem's session
        await wait_for(pilot, lambda: screen.state.status == "paused")
        # counted in the store, not on the screen (which may lag the engine on a busy box): once paused, the
        # engine ends the experiment under way at most, and then writes none
        second_id = store.sessions(kind="optimize", limit=1)[0]["id"]
        n = before = _written(store, second_id)
        for _ in range(40):  # until two looks half a second apart agree (a running engine never settles)
            await pilot.pause(0.5)
            settled = _written(store, second_id)
            if settled == before:
                break
            before = settled
        assert settled == before and settled <= n + 1
        await pilot.press("q", "y")
        await wait_for(pilot, lambda: not screen.engine_running, timeout=30)
    assert [r.status for r in batch.results] == ["correct", "stopped"]  # the third problem never started
    second = store.session(batch.results[1].session_id)
    assert second["status"] == "stopped"  # resumable with autokernel optimize --resume
    assert [e.action for _, e in store.events(second["id"], types=["control"])][:2] == ["pause", "stop"]
    assert store.session(batch.batch_id)["status"] == "stopped"


def test_bad_kernelbench_paths_fail_before_any_screen(tmp_path):
    args = build_parser().parse_args(["--kernelbench", str(tmp_path / "nope"), "--db", str(tmp_path / "s.db")])
    with pytest.raises(UserError, match="no such file or folder"):
        make_app(args)
    (tmp_path / "empty").mkdir()
    args = build_parser().parse_args(["--kernelbench", str(tmp_path / "empty"), "--db", str(tmp_path / "s.db"),
                                      "--device", "cpu"])
    with pytest.raises(UserError, match="no problem files"):
        make_app(args)


@sync
async def test_a_stopped_batch_resumes_on_the_same_screen(tmp_path, monkeypatch):
    """`autokernel-tui --resume BATCH`: the finished problem shown as it was, the others run, the batch completes."""
    _, first, store = _batch(tmp_path, monkeypatch, ["1_good.py", "2_wrong.py", "3_good.py"])
    first.on_result = lambda i, r: first.stop()  # stopped as the first problem ends
    first.run()
    assert [r.status for r in first.results] == ["correct"] and store.session(first.batch_id)["status"] == "stopped"
    db = str(tmp_path / "s.db")
    with pytest.raises(UserError, match="leave out --max-experiments, --agent"):
        make_app(build_parser().parse_args(["--resume", first.batch_id, "--max-experiments", "3", "--agent", "x",
                                            "--db", db]))
    app = make_app(build_parser().parse_args(["--resume", first.batch_id, "--db", db]))
    batch = app.live_session
    assert app.mode == "kernelbench" and batch.batch_id == first.batch_id
    assert [r.session_id for r in batch.results] == [first.results[0].session_id]
    batch.session_factory = first.session_factory  # the loop's doubles, as the first run had
    async with app.run_test(size=(140, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, KernelBenchScreen)
        await wait_for(pilot, lambda: not screen.engine_running, timeout=60)
        await pilot.pause(0.2)
        assert [r[1:3] for r in _cells(screen.query_one(ProblemTable))] == [
            ["1_good", "correct"], ["2_wrong", "incorrect"], ["3_good", "correct"]]
    assert store.session(first.batch_id)["status"] == "completed" and len(store.sessions(kind="optimize")) == 3


@sync
async def test_r_on_the_sessions_screen_resumes_a_stopped_batch(tmp_path, monkeypatch):
    """The sessions list: `r` on a stopped batch goes on with it on the KernelBench screen, to completion."""
    from autokernel.tui.screens.sessions import SessionsScreen

    _, first, store = _batch(tmp_path, monkeypatch, ["1_good.py", "2_good.py"])
    first.on_result = lambda i, r: first.stop()
    first.run()
    assert store.session(first.batch_id)["status"] == "stopped"
    resuming = KernelBenchBatch.resuming

    def with_doubles(*a, **kw):  # the loop's doubles, as the first run had
        batch = resuming(*a, **kw)
        batch.session_factory = first.session_factory
        return batch

    monkeypatch.setattr(KernelBenchBatch, "resuming", with_doubles)
    app = AutokernelApp(store, mode="sessions")
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        screen.query_one("DataTable").move_cursor(row=[r["id"] for r in screen.rows].index(first.batch_id))
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, KernelBenchScreen), timeout=10)
        await wait_for(pilot, lambda: not app.screen.engine_running, timeout=60)
        await pilot.pause(0.2)
        assert [r[1:3] for r in _cells(app.screen.query_one(ProblemTable))] == [["1_good", "correct"], ["2_good", "correct"]]
        assert app.mode == "kernelbench"
    assert store.session(first.batch_id)["status"] == "completed"
