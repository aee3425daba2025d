"""The kernel timer's two looks: the lower median counts, and looks far apart are reported."""

from autokernel.engine.timing import UNSTEADY, lower_look


def test_the_lower_of_two_looks_counts_and_a_wide_gap_is_reported():
    first = {"candidate": 0.238, "eager": 0.557, "torch.compile": None}
    second = {"candidate": 0.0505, "eager": 0.556, "torch.compile": None}
    final, note = lower_look(first, second)
    assert final == {"candidate": 0.0505, "eager": 0.556, "torch.compile": None}
    assert note == ("the GPU was not steady: candidate 0.238 ms in the first look, 0.0505 ms in the second "
                    "(the lower counts)")


def test_close_looks_say_nothing_and_a_missing_look_keeps_the_other():
    final, note = lower_look({"candidate": 1.0, "eager": 2.0}, {"candidate": None, "eager": 2.0 * UNSTEADY * 0.99})
    assert final == {"candidate": 1.0, "eager": 2.0} and note == ""


# -- fair timing: when the wall clock overrules the events, all three are compared by wall clock ------------
from autokernel.engine import fair_timing as ft  # noqa: E402
from autokernel.engine.fair_timing import Times, WallLook  # noqa: E402
from autokernel.engine.results import BenchRecord  # noqa: E402


def _times(cand, eager, comp=None):
    """Times from (events ms, wall ms, host ms) per function (None: not timed)."""
    looks = {"candidate": cand, "eager": eager, "torch.compile": comp}
    return Times(events={n: (v[0] if v else None) for n, v in looks.items()},
                 wall={n: (WallLook(v[1], v[2]) if v else None) for n, v in looks.items()})


def _record(fields, reported):
    return BenchRecord(kernel="softmax", backend="triton", shape={"rows": 4096, "cols": 4096}, dtype="bf16",
                       device_name="made-up", kernel_ms=reported["candidate"], eager_ms=reported["eager"],
                       compile_ms=reported["torch.compile"], metric="GB/s", achieved=0.0, ceiling=0.0,
                       fraction_of_ceiling=0.0, speedup_eager=0.0, speedup_compile=None, meaningful=True, **fields)


def test_a_launch_bound_candidate_is_compared_with_eager_by_wall_clock_too():
    # the H100's one-row-per-program softmax: events 0.029 ms, wall clock 0.104 ms, the host busy all along
    t = _times(cand=(0.029, 0.104, 0.101), eager=(0.058, 0.06, 0.02), comp=(0.05, 0.07, 0.03))
    assert t.method() == ft.WALL and t.reason() == ft.LAUNCH_BOUND
    reported = t.reported()
    assert reported == {"candidate": 0.104, "eager": 0.06, "torch.compile": 0.07}
    assert abs(ft.speedup(reported["eager"], reported["candidate"]) - 0.06 / 0.104) < 1e-12  # not 0.058 / 0.104
    fields = t.record_fields()
    assert fields == {"timed_by": "wall clock", "timing_reason": "launch-bound",
                      "kernel_event_ms": 0.029, "kernel_wall_ms": 0.104, "eager_event_ms": 0.058,
                      "eager_wall_ms": 0.06, "compile_event_ms": 0.05, "compile_wall_ms": 0.07}
    assert ft.timing_line(_record(fields, reported)) == (
        "launch-bound: wall clock 0.104 ms vs eager 0.06 ms wall (events 0.029 vs 0.058), "
        "torch.compile 0.07 ms wall (events 0.05)")


def test_work_that_escapes_the_events_still_does_not_look_fast():
    # a side stream does the real work: events see almost nothing, the host returned early, the GPU was busy
    t = _times(cand=(0.002, 0.5, 0.01), eager=(0.4, 0.41, 0.02))
    assert t.method() == ft.WALL and t.reason() == ft.ESCAPES
    reported = t.reported()
    assert reported["candidate"] == 0.5 and reported["torch.compile"] is None
    assert ft.speedup(reported["eager"], reported["candidate"]) < 1  # events would have said 200x


def test_events_stand_when_the_wall_clock_agrees_and_nothing_is_said():
    t = _times(cand=(0.05, 0.06, 0.01), eager=(0.1, 0.11, 0.01))
    assert t.method() == ft.EVENTS and t.reason() == "" and t.reported()["candidate"] == 0.05
    fields = t.record_fields()
    assert fields["timed_by"] == "events" and fields["kernel_wall_ms"] == 0.06 and fields["compile_event_ms"] is None
    assert ft.timing_line(_record(fields, t.reported())) == ""


def test_a_launch_bound_baseline_is_not_the_candidates_gain():
    # eager's several launches at a tiny shape: its wall clock overrules its events, so the candidate's wall counts too
    t = _times(cand=(0.004, 0.03, 0.02), eager=(0.02, 0.09, 0.085))
    assert t.overruled() == ["eager"] and t.method() == ft.WALL and t.reason() == "eager launch-bound"
    assert t.reported() == {"candidate": 0.03, "eager": 0.09, "torch.compile": None}


def test_a_method_decided_on_the_first_look_is_kept():
    # lower events from a second look would let the first look's wall clock overrule: the decision stands
    t = _times(cand=(0.01, 0.07, 0.06), eager=(0.1, 0.1, 0.01))
    assert t.method() == ft.WALL
    assert t.reported(ft.EVENTS)["candidate"] == 0.01
    fields = t.record_fields(ft.EVENTS)
    assert fields["timed_by"] == "events" and fields["timing_reason"] == ""


def test_a_second_look_faster_than_the_first_wall_clock_allows_is_overruled():
    # first look: events 0.06, wall 0.1 agree; the second look's events say 0.02, which that wall clock overrules
    first = _times(cand=(0.06, 0.1, 0.02), eager=(0.1, 0.11, 0.01))
    second = Times(events={"candidate": 0.02, "eager": 0.1, "torch.compile": None}, wall={})
    chosen, method, why = ft.combine(first, second)
    assert (method, why) == (ft.WALL, ft.ESCAPES)
    assert chosen.reported(method) == {"candidate": 0.1, "eager": 0.11, "torch.compile": None}
    # without the fast second look the events stand, the lower of each
    chosen, method, why = ft.combine(first, Times(events={"candidate": 0.07, "eager": 0.09}, wall={}))
    assert (method, why) == (ft.EVENTS, "") and chosen.reported(method)["eager"] == 0.09


def test_a_slow_first_wall_look_is_the_hosts_hiccup_when_the_second_is_within_the_slack():
    first = _times(cand=(0.029, 0.3, 0.29), eager=(0.058, 0.07, 0.02))
    second = Times(events=dict(first.events), wall={"candidate": WallLook(0.04, 0.03), "eager": WallLook(0.08, 0.02),
                                                    "torch.compile": None})
    chosen, method, why = ft.combine(first, second)
    # the recorded (fastest) wall look, 0.04, does not overrule 0.029: the events decide, as recorded
    assert (method, why) == (ft.EVENTS, "")
    assert chosen.reported(method) == {"candidate": 0.029, "eager": 0.058, "torch.compile": None}


def test_the_overrule_threshold_and_the_batches():
    assert not ft.overrules(0.1, 1.5 * 0.1 + ft.SLACK_MS) and ft.overrules(0.1, 1.5 * 0.1 + ft.SLACK_MS + 1e-6)
    assert ft.fastest([None, WallLook(0.2, 0.1), WallLook(0.15, 0.14)]) == WallLook(0.15, 0.14)
    assert ft.fastest([None, None]) is None
    assert ft.batch_size(1e-6) == 200 and ft.batch_size(100.0) == 5 and ft.batch_size(0.5) == 100
    assert ft.reason(WallLook(1.0, 0.8)) == ft.LAUNCH_BOUND and ft.reason(WallLook(1.0, 0.79)) == ft.ESCAPES
    assert ft.speedup(None, 0.1) is None and ft.speedup(0.1, 0.0) is None


# -- bench's wiring on a GPU, with made-up measurements in place of the GPU's ----------------------------
import torch  # noqa: E402

from autokernel.engine import timing  # noqa: E402
from autokernel.engine.roofline import Ceilings  # noqa: E402
from autokernel.kernels import get_spec  # noqa: E402


def _fake_gpu(monkeypatch, first, second_events, second_wall):
    """bench(device='cuda') with every GPU measurement replaced by made-up numbers: `first` per function
    (events, wall, host), then the second look's events or wall-clock numbers."""
    spec = get_spec("softmax")
    kernel = lambda x: torch.softmax(x, -1)  # noqa: E731
    compiled = lambda x: torch.softmax(x, -1)  # noqa: E731
    name = {id(kernel): "candidate", id(spec.eager): "eager", id(compiled): "torch.compile"}
    calls = []

    def time_kernel(spec_, fn, sets, device, dtype, again=False, wall_after=None):
        calls.append(("candidate", "again" if again else "wall" if wall_after is not None else "first"))
        if wall_after is not None:
            return None, WallLook(*second_wall["candidate"])
        if again:
            return second_events["candidate"], None
        return first["candidate"][0], WallLook(*first["candidate"][1:])

    def time_ms(fn, sets, device, data_args=(0,), again=False):
        n = name[id(fn)]
        calls.append((n, "again" if again else "first"))
        return (second_events[n], None, None, ()) if again else (first[n][0], WallLook(*first[n][1:]), None, ())

    def wall_look(fn, sets, event_ms):
        calls.append((name[id(fn)], "wall"))
        return WallLook(*second_wall[name[id(fn)]])

    monkeypatch.setattr(timing, "device_ceilings", lambda device: Ceilings(
        "made-up", 1e9, {"fp32": 1e9}, launch_us=0.0, device="cuda"))
    monkeypatch.setattr(timing, "input_sets", lambda *a: [(torch.randn(4, 8),)])
    monkeypatch.setattr(timing, "_time_kernel", time_kernel)
    monkeypatch.setattr(timing, "time_ms", time_ms)
    monkeypatch.setattr(timing, "wall_look", wall_look)
    monkeypatch.setattr(timing, "compiled_baseline", lambda *a: (compiled, "", 0.0))
    monkeypatch.setattr(timing, "copy_gbs_at", lambda nbytes: None)
    return timing.bench(spec, kernel, {"rows": 4, "cols": 8}, "fp32", "cuda"), calls


def test_bench_times_the_baselines_by_wall_clock_when_the_candidate_is_launch_bound(monkeypatch):
    rec, calls = _fake_gpu(
        monkeypatch,
        first={"candidate": (0.029, 0.11, 0.108), "eager": (0.058, 0.062, 0.02), "torch.compile": (0.05, 0.08, 0.03)},
        second_events={},
        second_wall={"candidate": (0.104, 0.1), "eager": (0.06, 0.02), "torch.compile": (0.09, 0.03)})
    assert ("candidate", "wall") in calls and ("eager", "wall") in calls and ("torch.compile", "wall") in calls
    assert not any(kind == "again" for _, kind in calls)  # no events second look: the wall clock decides
    assert (rec.kernel_ms, rec.eager_ms, rec.compile_ms) == (0.104, 0.06, 0.08)  # the faster wall look of each
    assert abs(rec.speedup_eager - 0.06 / 0.104) < 1e-12 and abs(rec.speedup_compile - 0.08 / 0.104) < 1e-12
    assert (rec.timed_by, rec.timing_reason) == ("wall clock", "launch-bound")
    assert (rec.kernel_event_ms, rec.eager_event_ms, rec.kernel_wall_ms, rec.eager_wall_ms) == (0.029, 0.058, 0.104, 0.06)
    assert rec.note.startswith("launch-bound: wall clock 0.104 ms vs eager 0.06 ms wall (events 0.029 vs 0.058)")


def test_bench_keeps_the_events_and_their_lower_look_when_the_wall_clock_agrees(monkeypatch):
    rec, calls = _fake_gpu(
        monkeypatch,
        first={"candidate": (0.05, 0.06, 0.01), "eager": (0.1, 0.11, 0.01), "torch.compile": (0.08, 0.09, 0.01)},
        second_events={"candidate": 0.045, "eager": 0.1, "torch.compile": 0.085}, second_wall={})
    assert not any(kind == "wall" for _, kind in calls)
    assert (rec.kernel_ms, rec.eager_ms, rec.compile_ms) == (0.045, 0.1, 0.08)
    assert rec.timed_by == "events" and rec.timing_reason == "" and rec.kernel_wall_ms == 0.06 and rec.note == ""


# -- where the choice is said: the log, the headless line, the TUI's candidate panel, the exported report ----
LINE = "launch-bound: wall clock 0.104 ms vs eager 0.06 ms wall (events 0.029 vs 0.058)"


def _bench_event(timing):
    from autokernel.engine import events as ev
    return ev.BenchResult(candidate_id="softmax-0001", target="softmax", shape={"rows": 4096, "cols": 4096},
                          dtype="bf16", kernel_ms=0.104, eager_ms=0.06, speedup_eager=0.06 / 0.104,
                          fraction_of_ceiling=0.5, timing=timing)


def test_the_log_and_the_headless_line_say_when_the_wall_clock_decided():
    import io

    from autokernel.engine import events as ev
    from autokernel.engine.commands.optimize import HeadlessPrinter
    from autokernel.engine.session_state import describe

    assert describe(_bench_event(LINE))[1].endswith(f"ceiling; {LINE}")
    assert LINE not in describe(_bench_event(""))[1] and "wall" not in describe(_bench_event(""))[1]
    out = io.StringIO()
    printer = HeadlessPrinter(out)
    printer(ev.CandidateWritten(candidate_id="softmax-0001", target="softmax", experiment=1, label="rows"))
    printer(_bench_event(LINE))
    printer(ev.Decision(candidate_id="softmax-0001", target="softmax", decision="discarded"))
    assert f"0.577x eager ({LINE})  discarded" in out.getvalue()


def test_the_exported_report_names_the_records_timed_by_wall_clock(tmp_path):
    import dataclasses

    from autokernel.engine.export import _results_md
    from autokernel.engine.search_state import CandidateRecord, SearchState, TargetState

    def chosen(cid, timing):
        t = TargetState(name="softmax", row=0, shape={"rows": 4096, "cols": 4096}, dtype="bf16", backend="triton")
        c = CandidateRecord(candidate_id=cid, idea_id=None, experiment=1, target="softmax", backend="triton",
                            label="rows", parent_id=None, source="", params={},
                            bench=dataclasses.asdict(_bench_event(timing)))
        return t, c

    md = _results_md({"id": "s1"}, SearchState(), [chosen("softmax-0001", LINE), chosen("softmax-0002", "")], [],
                     "pkg", tmp_path, ["softmax"])
    assert f"Timed by wall clock, eager and torch.compile alike: softmax softmax-0001: {LINE}\n" in md + "\n"
    assert "softmax-0002:" not in md


def test_the_harness_panel_shows_the_wall_clock_line_in_full_and_a_mark_when_compact():
    import dataclasses

    from autokernel.engine import events as ev
    from autokernel.engine.session_state import SessionState
    from tools.synthetic import session_events
    from autokernel.tui.widgets.stages import StagesPanel

    from tui_support import text_of

    events = list(session_events(4, 7, "auto", finish=False))
    first_timed = next(i for i, e in enumerate(events) if isinstance(e, ev.BenchResult))
    for timing in (LINE, ""):
        state = SessionState()
        for e in events[:first_timed] + [dataclasses.replace(events[first_timed], timing=timing)]:
            state.apply(e)
        panel = StagesPanel()
        panel.show(state)
        assert (LINE in text_of(panel)) == bool(timing)
        panel.compact = True
        panel.show(state)
        assert ("wall clock" in text_of(panel)) == bool(timing)
