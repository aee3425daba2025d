"""The reducer the screens share: rows in Amdahl order, the current candidate, the chart's points,
approval, and replay checkpoints that give the same state as folding from the start."""

from __future__ import annotations


import pytest

from autokernel.engine import events as ev
from autokernel.engine.commands.replay import state_json
from autokernel.engine.session_state import SessionState, Timeline, amdahl, fold, load_timeline
from tools.synthetic import session_events

from tui_support import stored_session, sync


def test_amdahl_bound():
    assert amdahl(0.5, 2.0) == 1 / (0.5 + 0.25)
    assert amdahl(0.0, 10.0) == 1.0
    assert abs(amdahl(1.0, 4.0) - 4.0) < 1e-12


def test_fold_fills_rows_targets_and_chart():
    events = list(session_events(40))
    s = fold(events, "x")
    assert s.status == "completed"
    bounds = [r.max_speedup for r in s.rows]
    assert bounds == sorted(bounds, reverse=True), "rows keep the engine's Amdahl order"
    t = s.targets["rmsnorm"]
    assert len(t.points) == 40 == s.experiments == s.decided
    assert [p.experiment for p in t.points] == list(range(1, 41))
    failed = [p for p in t.points if not p.passed]
    assert failed and all(p.speedup is None for p in failed)
    assert s.failed == len(failed) and s.passed == 40 - len(failed)
    # the frontier only climbs, and ends at the kept kernel
    speeds = [v for _, v in t.frontier]
    assert speeds == sorted(speeds) and t.best_speedup == speeds[-1]
    kept = [e for e in events if isinstance(e, ev.Decision) and e.decision == "kept"]
    assert t.best_id == kept[-1].candidate_id and s.kept == len(kept)
    bench = next(e for e in events if isinstance(e, ev.BenchResult) and e.candidate_id == t.best_id)
    assert t.best_speedup == bench.speedup_eager and t.best_sol == bench.fraction_of_ceiling
    row = s.rows[t.row]
    assert row.kind == "rmsnorm" and row.best_speedup == t.best_speedup and row.status == "budget"
    assert abs(row.now_ms - row.self_ms / t.best_speedup) < 1e-12
    assert abs(row.e2e_now - amdahl(row.share, t.best_speedup)) < 1e-12
    assert t.compile_speedup is not None and abs(t.compile_speedup - 1.3) < 1e-9
    assert s.elapsed_s == events[-1].ts - events[0].ts
    assert abs(s.rate_per_hour() - 40 * 3600 / s.elapsed_s) < 1e-9


def test_current_candidate_stages_and_failure_reason():
    s = SessionState()
    for e in session_events(8):
        s.apply(e)
        if isinstance(e, ev.Decision) and e.decision == "failed":
            break
    c = s.candidate
    assert c.decision == "failed"
    failing = [(name, st) for name, st in c.stages.items() if st[0] == "fail"]
    assert len(failing) == 1 and failing[0][1][1], "the failing stage carries its reason"
    assert c.diff.startswith("---") and "kernel_fn" in c.source


def test_pending_approval_is_set_then_cleared():
    s = SessionState()
    s.apply(ev.SessionStarted(approval="ask"))
    s.apply(ev.AwaitingApproval(candidate_id="k-0002", target="k", speedup=1.5))
    assert s.pending.candidate_id == "k-0002"
    s.apply(ev.Decision(candidate_id="k-0002", target="k", decision="rejected", by="user"))
    assert s.pending is None
    s.apply(ev.ControlChanged(action="approval", value="auto"))
    assert s.approval == "auto"
    s.apply(ev.ControlChanged(action="pause"))
    assert s.status == "paused"


def test_log_is_bounded():
    s = SessionState(log_lines=50)
    for e in session_events(30):
        s.apply(e)
    assert len(s.log) == 50 and s.log[-1].text == "session completed"


def test_timeline_any_position_equals_a_fresh_fold():
    events = list(session_events(60))
    tl = Timeline(events, "x", every=37)
    for pos in (0, 1, 36, 37, 38, 200, 411, len(events) - 1, len(events), 150, 3):  # backwards too
        assert state_json(tl.state_at(pos)) == state_json(fold(events[:pos], "x")), pos
    # a state handed out is the caller's: folding more into it leaves the checkpoints alone
    s = tl.state_at(100)
    for e in events[100:]:
        s.apply(e)
    assert state_json(tl.state_at(100)) == state_json(fold(events[:100], "x"))


def test_timeline_experiment_navigation():
    events = list(session_events(10))
    tl = Timeline(events, "x")
    p5 = tl.position_of_experiment(5)
    assert isinstance(events[p5 - 1], ev.CandidateWritten) and events[p5 - 1].experiment == 5
    assert tl.next_experiment(p5, 1) == tl.position_of_experiment(6)
    assert tl.next_experiment(p5, -1) == tl.position_of_experiment(4)
    assert tl.position_of_experiment(99) is None
    assert tl.next_experiment(len(events), 1) == len(events)


def test_replay_of_a_long_stored_session_reaches_every_step(tmp_path):
    """A 1,000-experiment session opens and any step of it can be shown (how fast is measured by
    `python -m tools.bench_ui`, not asserted here)."""
    store, sid = stored_session(tmp_path / "s.db", experiments=1000)
    row, tl = load_timeline(store, "latest")
    assert row["id"] == sid and tl.final.experiments == 1000
    for pos in range(len(tl) - 1, 0, -len(tl) // 50):
        assert tl.state_at(pos).experiments <= 1000
    assert tl.state_at(tl.position_of_experiment(500)).experiments == 500


def test_the_integration_line_reads_as_words():
    from autokernel.engine.session_state import describe

    e = ev.IntegrationResult(replaced=[{"kind": "rmsnorm", "modules": 9, "calls": 27, "fallbacks": 0, "mismatches": [],
                                        "candidate_id": "rmsnorm-0001"}], correct=True, model_ms=31.8, eager_ms=32.8,
                             speedup_eager=1.03, meaningful=True)
    level, text = describe(e)
    assert level == "success" and text == "integrated rmsnorm in 9 modules (27 calls): model 31.8 ms, 1.03x vs eager"


def test_a_profile_session_reads_without_an_agent_and_names_its_ops():
    """A profile has no agent or approval to show, and 'top: other 68%, other 15%' said nothing."""
    from autokernel.engine.session_state import describe

    _, started = describe(ev.SessionStarted(kind="profile", model="convnet.py", device="cpu", device_name="CPU"))
    assert started == "session started: profile convnet.py on CPU"
    rows = [{"name": "aten::conv2d", "kind": "other", "share": 0.68}, {"name": "Softmax", "kind": "softmax", "share": 0.1}]
    _, ready = describe(ev.ProfileReady(rows=rows, total_ms=272.0))
    assert ready.endswith("top: other (aten::conv2d) 68%, softmax 10%")


def test_an_integration_shows_its_measured_speedup_in_the_rows_it_swapped_until_a_new_best():
    """`e2e now` was an Amdahl estimate only: on the CPU (timings not meaningful) it read 1.000x even after the
    integration measured the model at 0.88x."""
    events = list(session_events(12, finish=False))
    s = fold(events, "x")
    target_row = s.targets["rmsnorm"].row
    assert [r.e2e_now for r in s.rows if r.index != target_row] == [1.0] * (len(s.rows) - 1)
    estimate = s.rows[target_row].e2e_now
    integrated = ev.IntegrationResult(replaced=[{"kind": "rmsnorm", "modules": 5, "calls": 5}], correct=True,
                                      model_ms=11.4, eager_ms=10.0, speedup_eager=0.88, meaningful=False)
    s.apply(integrated)
    assert s.rows[target_row].e2e_now == 0.88 and not s.rows[target_row].e2e_meaningful
    assert [r.e2e_now for r in s.rows if r.index != target_row] == [1.0] * (len(s.rows) - 1)
    assert state_json(s)["rows"][target_row]["e2e_now"] == 0.88  # `autokernel replay --json` reads the same
    kept = next(e for e in reversed(events) if isinstance(e, ev.Decision) and e.decision == "kept")
    s.apply(ev.Decision(candidate_id=kept.candidate_id, target="rmsnorm", decision="kept", reason="new best"))
    assert s.rows[target_row].e2e_now == estimate  # stale: the estimate again, until the next integration
    failed = fold([*events, ev.IntegrationResult(replaced=integrated.replaced, correct=False, speedup_eager=0.88)])
    assert failed.rows[target_row].e2e_now == estimate


def test_a_kind_the_patched_eager_forward_left_out_does_not_show_its_speedup():
    """The subset search may keep a kind only under torch.compile: the eager speedup is not that row's."""
    s = fold(list(session_events(12, finish=False)), "x")
    target_row = s.targets["rmsnorm"].row
    estimate = s.rows[target_row].e2e_now
    s.apply(ev.IntegrationResult(replaced=[{"kind": "rmsnorm", "modules": 5, "calls": 5, "chosen": ["patched_compile"]}],
                                 correct=True, model_ms=9.0, eager_ms=10.0, speedup_eager=1.1, meaningful=True))
    assert s.rows[target_row].e2e_now == estimate
    s.apply(ev.IntegrationResult(replaced=[{"kind": "rmsnorm", "modules": 5, "calls": 5, "chosen": ["patched"]}],
                                 correct=True, model_ms=9.0, eager_ms=10.0, speedup_eager=1.1, meaningful=True))
    assert s.rows[target_row].e2e_now == 1.1


def test_the_harness_panel_shows_no_speed_of_light_for_a_cpu_timing():
    """A CPU has no ceiling worth a fraction: '0% of speed of light' beside an interpreter's time said nothing."""
    import dataclasses

    from autokernel.engine.session_state import SessionState
    from tools.synthetic import session_events
    from autokernel.tui.widgets.stages import StagesPanel

    from tui_support import text_of

    for meaningful in (True, False):
        state = SessionState()
        for e in session_events(4, 7, "auto", finish=False):
            if isinstance(e, ev.BenchResult):  # up to the first timed candidate
                state.apply(dataclasses.replace(e, meaningful=meaningful))
                break
            state.apply(e)
        for compact in (False, True):
            panel = StagesPanel()
            panel.compact = compact
            panel.show(state)
            text = text_of(panel)
            assert "timed" in text
            assert (("speed of light" in text or "SoL" in text) == meaningful), text


def test_the_model_against_torch_compile_is_our_best_forward_over_compiles():
    from autokernel.engine.session_state import model_vs_compile

    base = dict(correct=True, model_ms=29.3, eager_ms=33.0, compile_ms=25.0, speedup_eager=1.13)
    assert model_vs_compile(ev.IntegrationResult(**base, patched_compile_ms=20.0)) == pytest.approx(1.25)
    assert model_vs_compile(ev.IntegrationResult(**base)) == pytest.approx(25.0 / 29.3)  # no compiled patch
    assert model_vs_compile(ev.IntegrationResult(**dict(base, correct=False), patched_compile_ms=20.0)) is None
    assert model_vs_compile(ev.IntegrationResult(**dict(base, compile_ms=None))) is None
    assert model_vs_compile(None) is None


@sync
async def test_the_status_line_heads_with_the_model_against_torch_compile_once_integrated(tmp_path):
    from autokernel.engine.store import Store
    from autokernel.tui.app import AutokernelApp
    from tools.synthetic import write_session
    from autokernel.tui.widgets.status import StatusLine

    from tui_support import text_of

    store = Store(tmp_path / "s.db")
    sid = write_session(store, experiments=4, finish=False)
    store.append(sid, ev.IntegrationResult(correct=True, model_ms=29.3, eager_ms=33.0, compile_ms=25.0,
                                           speedup_eager=1.13, patched_compile_ms=26.0, meaningful=True))
    app = AutokernelApp(store, mode="replay", replay=sid)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "model 0.96× compile" in text_of(app.screen.query_one(StatusLine))
        await pilot.press("left")  # one event back: not integrated yet, no headline
        assert "compile" not in text_of(app.screen.query_one(StatusLine))
