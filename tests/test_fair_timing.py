"""Fair timing's verdict follows from the numbers it records: `timed_by` is "wall clock" exactly when a
recorded wall clock overrules its recorded events (H100 run 26: a starter recorded as timed by wall clock
whose recorded wall clocks were all within the slack of its events)."""

import random

from autokernel.engine import fair_timing as ft
from autokernel.engine.fair_timing import NAMES, Times, WallLook
from test_timing import _fake_gpu, _times


def _overruled_by_record(fields: dict) -> bool:
    """What a reader of the record concludes from its own numbers alone."""
    pairs = [(fields["kernel_event_ms"], fields["kernel_wall_ms"]), (fields["eager_event_ms"], fields["eager_wall_ms"]),
             (fields["compile_event_ms"], fields["compile_wall_ms"])]
    return any(ev is not None and wall is not None and ft.overrules(ev, wall) for ev, wall in pairs)


# Made-up looks in ms, shaped as run 26's softmax starter was (nothing here is timed): events 0.0272; a first
# wall look slowed by the host (0.12) overrules them, the second (0.0444, the one recorded) is well within
# 1.5 x 0.0272 + 0.05. Per name: (events, wall, host) for the first look, (wall, host) for the second.
FIRST = {"candidate": (0.0272, 0.12, 0.11), "eager": (0.0576, 0.0568, 0.02), "torch.compile": (0.0446, 0.0435, 0.02)}
SECOND_WALL = {"candidate": (0.0444, 0.04), "eager": (0.0570, 0.02), "torch.compile": (0.0440, 0.02)}
EVENTS = {name: look[0] for name, look in FIRST.items()}


def test_a_slow_first_wall_look_that_a_faster_one_clears_leaves_the_events_standing():
    first = _times(cand=FIRST["candidate"], eager=FIRST["eager"], comp=FIRST["torch.compile"])
    second = Times(events=dict(first.events), wall={n: WallLook(*look) for n, look in SECOND_WALL.items()})
    assert first.method() == ft.WALL
    chosen, method, why = ft.combine(first, second)
    assert (method, why) == (ft.EVENTS, "")
    fields = chosen.record_fields(method, why)
    assert fields["timed_by"] == "events" and fields["timing_reason"] == ""
    # the record carries the looks it was given: the events, and the second (recorded) wall look
    assert fields["kernel_wall_ms"] == SECOND_WALL["candidate"][0] and fields["kernel_event_ms"] == EVENTS["candidate"]
    assert chosen.reported(method) == EVENTS


def test_the_verdict_always_matches_the_recorded_numbers():
    rng = random.Random(19)
    seen = set()
    for _ in range(3000):
        def look():
            ev = rng.choice([None, rng.uniform(0.005, 0.3)])
            wall = None if ev is None else WallLook(ev * rng.uniform(0.8, 4.0), 0.0)
            return ev, wall
        firsts = {n: look() for n in NAMES}
        first = Times(events={n: v[0] for n, v in firsts.items()}, wall={n: v[1] for n, v in firsts.items()})
        if first.method() == ft.WALL:  # bench's second look: wall clocks only
            second = Times(events=dict(first.events),
                           wall={n: (WallLook(first.events[n] * rng.uniform(0.8, 4.0), 0.0) if first.events[n] else None)
                                 for n in NAMES})
        else:  # events only
            second = Times(events={n: (e * rng.uniform(0.3, 1.2) if e else None) for n, e in first.events.items()},
                           wall={n: None for n in NAMES})
        chosen, method, why = ft.combine(first, second)
        fields = chosen.record_fields(method, why)
        assert (fields["timed_by"] == ft.WALL) == _overruled_by_record(fields), fields
        assert bool(fields["timing_reason"]) == (fields["timed_by"] == ft.WALL)
        seen.add((first.method(), method))
    # every path was taken, the hiccup one among them (first look overruled, the recorded one not)
    assert seen == {(ft.WALL, ft.WALL), (ft.WALL, ft.EVENTS), (ft.EVENTS, ft.WALL), (ft.EVENTS, ft.EVENTS)}


def test_bench_records_events_when_only_the_first_wall_look_overruled(monkeypatch):
    rec, calls = _fake_gpu(monkeypatch, first=FIRST, second_events={}, second_wall=SECOND_WALL)
    assert ("candidate", "wall") in calls  # the second look was the wall-clock one
    assert (rec.timed_by, rec.timing_reason) == ("events", "")
    # the record carries the made-up looks it was given
    assert (rec.kernel_ms, rec.eager_ms, rec.compile_ms) == (EVENTS["candidate"], EVENTS["eager"], EVENTS["torch.compile"])
    assert rec.kernel_wall_ms == SECOND_WALL["candidate"][0] and not _overruled_by_record(vars(rec))
    assert not rec.note.startswith(("launch-bound", "work escapes"))
