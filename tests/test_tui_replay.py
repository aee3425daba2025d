"""Replay and sessions screens, driven by keys through Textual's Pilot on a real SQLite session file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autokernel.engine import events as ev
from autokernel.tui.app import AutokernelApp
from autokernel.tui.screens.replay import ReplayBar, ReplayScreen
from autokernel.tui.screens.sessions import SessionsScreen
from autokernel.tui.widgets.bottlenecks import BottleneckTable
from autokernel.tui.widgets.chart import SpeedupChart
from autokernel.tui.widgets.code import CodePanel
from autokernel.tui.widgets.dashboard import Dashboard
from autokernel.tui.widgets.stages import StagesPanel

from tui_support import stored_session, sync, text_of, wait_for


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
@sync
async def test_replay_steps_through_the_stored_events(tmp_path, size):
    store, sid = stored_session(tmp_path / "s.db", experiments=12)
    events = [e for _, e in store.events(sid)]
    app = AutokernelApp(store, mode="replay", replay="latest")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ReplayScreen) and screen.position == len(events)
        dash = screen.query_one(Dashboard)
        assert dash.has_class("-compact") == (size == (80, 24))
        # the table: every profiled op, in Amdahl order (largest end-to-end bound first)
        table = screen.query_one(BottleneckTable)
        kinds = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        rows = screen.state.rows
        assert kinds == [r.kind for r in rows] == ["rmsnorm", "matmul", "softmax", "elementwise"] or \
            kinds == [r.kind for r in sorted(rows, key=lambda r: -r.max_speedup)]
        bounds = [r.max_speedup for r in rows]
        assert bounds == sorted(bounds, reverse=True)

        # ← steps back one event at a time, → forward; the state is the fold of that many events
        await pilot.press("left", "left", "left")
        assert screen.position == len(events) - 3
        await pilot.press("right")
        assert screen.position == len(events) - 2

        # [ and ] move by experiment; Home goes to the start, where nothing has happened yet
        await pilot.press("home")
        assert screen.position == 0 and screen.state.candidate is None
        assert "before the first of 12 experiments" in text_of(screen.query_one(ReplayBar))
        await pilot.press("right_square_bracket")
        assert isinstance(events[screen.position - 1], ev.CandidateWritten)
        assert screen.state.candidate.experiment == 1
        assert "experiment 1 of 12" in text_of(screen.query_one(ReplayBar))
        assert "○" in text_of(screen.query_one(StagesPanel))  # pending ("○ pending", or at 80x24 the mark)

        # step to the first failing stage: the panel shows fail with its reason
        first_fail = next(i for i, e in enumerate(events) if isinstance(e, ev.StageResult) and e.status == "fail")
        failing = screen.timeline.final.targets["rmsnorm"].points
        failing_exp = next(p.experiment for p in failing if not p.passed)
        await pilot.press("g", *str(failing_exp), "enter")
        await pilot.pause()
        assert screen.state.candidate.experiment == failing_exp
        while screen.position <= first_fail:
            await pilot.press("right")
        stages = text_of(screen.query_one(StagesPanel))
        assert "✘" in stages and events[first_fail].detail[:20] in stages
        assert stages.count("✔") == [s for s in ("smoke", "shape_sweep", "stability", "determinism",
                                                         "edge_cases")].index(events[first_fail].stage)

        # g: jump to an experiment by number
        await pilot.press("g")
        await pilot.press(*"7", "enter")
        await pilot.pause()
        assert screen.state.candidate.experiment == 7

        # d toggles the code panel between the diff and the full source
        code = screen.query_one(CodePanel)
        assert not code.full_source and "diff" in code.border_title
        await pilot.press("d")
        assert code.full_source and "source" in code.border_title
        await pilot.press("d")
        assert not code.full_source

        # space plays forward at the chosen speed; + makes it faster
        await pilot.press("home", "plus", "space")
        start = screen.position
        await wait_for(pilot, lambda: screen.position > start + 5)
        await pilot.press("space")
        assert not screen.playing

        await pilot.press("end")
        assert screen.position == len(events) and screen.state.status == "completed"
        chart = screen.query_one(SpeedupChart)
        assert chart._target is not None and len(chart._target.points) == 12


@sync
async def test_sessions_screen_lists_and_opens_a_replay(tmp_path):
    store, sid = stored_session(tmp_path / "s.db", experiments=5)
    stored_session(tmp_path / "s.db", experiments=3, seed=8)
    app = AutokernelApp(store, mode="sessions")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        assert [r["id"] for r in screen.rows] == [r["id"] for r in store.sessions()]
        assert {r["id"] for r in screen.rows} == {sid, "synthetic-3-8"}
        await pilot.press("r")  # a completed session cannot be resumed: a warning, nothing else
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen)
        assert app.screen.timeline.session_id == screen.rows[0]["id"]
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, SessionsScreen)


@sync
async def test_help_and_command_palette_offer_the_screen_keys(tmp_path):
    store, _ = stored_session(tmp_path / "s.db", experiments=3)
    app = AutokernelApp(store, mode="replay", replay="latest")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        replay = app.screen
        titles = [c.title for c in app.get_system_commands(replay)]
        for title in ("Back", "Step", "Jump to exp", "Play/pause", "Diff/source"):
            assert title in titles
        await pilot.press("question_mark")
        await pilot.pause()
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is replay
        # a palette command runs the same action as its key
        await pilot.press("home")
        cmd = next(c for c in app.get_system_commands(replay) if c.title == "Step")
        await cmd.callback()
        assert replay.position == 1


def test_autokernel_replay_command_prints_the_steps(tmp_path):
    db = tmp_path / "s.db"
    store, sid = stored_session(db, experiments=6)
    n = len(store.events(sid))
    out = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "replay", "latest", "--db", str(db)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sum(1 for line in lines if line.strip()[:1].isdigit()) == n
    assert any("fail" in line and "stage_result" in line for line in lines)
    assert f"{sid}: completed, 6 experiments" in out.stdout

    out = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "replay", sid[:12], "--db", str(db),
                          "--json"], capture_output=True, text=True, timeout=60)
    docs = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(docs) == n + 1 and docs[-1]["type"] == "state"
    assert docs[-1]["state"]["experiments"] == 6 and docs[-1]["state"]["status"] == "completed"
    assert docs[0]["type"] == "session_started"


def test_bad_session_reference_is_one_line(tmp_path):
    db = tmp_path / "s.db"
    stored_session(db, experiments=2)
    for cmd in (["autokernel", "replay", "nope", "--db", str(db)], ["autokernel-tui", "--replay", "nope", "--db", str(db)]):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2
        assert out.stderr.strip().count("\n") == 0 and "no session 'nope'" in out.stderr
