"""The kernel-subset search alone (engine/kernel_selection.py), on fake forwards: each subset's time per
round is a deterministic function of the kinds in it, so each test knows the right answer."""

from __future__ import annotations

import pytest

from autokernel.engine.kernel_selection import LeaveOneOut, describe, run


def additive(base: float, cost: dict[str, float], jitter=(1.0,)):
    """ms per round of a subset: `base` + each kind's cost (negative: the kernel helps), times the
    round's jitter (the same for every subset of a round, as a GPU's clock drift would be)."""
    def measure(subsets):
        return {s: [(base + sum(cost[k] for k in s)) * j for j in jitter] for s in subsets}
    return measure


def test_it_drops_the_kinds_that_slow_the_forward_and_keeps_the_ones_that_help():
    cost = {"rmsnorm": -2.0, "softmax": +1.5, "layernorm": +0.8, "rotary_embedding": -0.5}
    search = run(LeaveOneOut(list(cost)), additive(20.0, cost, jitter=(1.0, 1.03, 0.98, 1.01, 0.99)))
    assert search.current == ("rmsnorm", "rotary_embedding")
    # softmax went first (it cost most), then layernorm; the two that help were needed in every round
    currents = [t.kinds for t in search.trials if t.left_out is None]
    assert currents == [tuple(cost), ("rmsnorm", "layernorm", "rotary_embedding")]
    assert search.stopped == "leaving out any kind made the forward slower in every round"
    chosen = search.chosen_trial()
    assert chosen.ms == pytest.approx(20.0 - 2.0 - 0.5)
    assert "chosen rmsnorm, rotary_embedding" in describe(search, "patched + torch.compile")


def test_a_gain_inside_the_rounds_spread_is_not_a_reason_to_drop_a_kind():
    """Leaving softmax out gains 3% at the median, but one round in five says it is slower: noise."""
    kinds = ("rmsnorm", "softmax")

    def measure(subsets):
        out = {}
        for s in subsets:
            if s == ("rmsnorm",):
                out[s] = [9.7, 9.7, 9.7, 10.1, 9.7]
            else:  # the current, or without rmsnorm (clearly slower)
                out[s] = [10.0] * 5 if s == kinds else [14.0] * 5
        return out

    search = run(LeaveOneOut(kinds), measure)
    assert search.current == kinds and search.steps == 1
    trial = next(t for t in search.trials if t.left_out == "softmax")
    assert trial.gain == pytest.approx(10.0 / 9.7 - 1) and trial.worst < 0
    # the same gain in every round is beyond the noise: then it goes
    search = run(LeaveOneOut(kinds), lambda subsets: {s: [9.7] * 5 if s == ("rmsnorm",) else measure([s])[s]
                                                      for s in subsets})
    assert search.current == ("rmsnorm",)
    # and a gain in every round smaller than min_gain does not
    search = run(LeaveOneOut(kinds), lambda subsets: {s: [9.9] * 5 if s == ("rmsnorm",) else measure([s])[s]
                                                      for s in subsets})
    assert search.current == kinds


def test_nine_kinds_cost_at_most_twice_nine_subsets_not_nine_squared():
    """Every kind slows the forward a little more than the noise, so the full greedy would walk down to one
    kind (9 + 8 + ... + 2 = 44 subsets, each a compile); the bound stops it at 2n."""
    kinds = [f"k{i}" for i in range(9)]
    cost = {k: 0.5 + 0.1 * i for i, k in enumerate(kinds)}
    asked = []

    def measure(subsets):
        asked.append(len(subsets) - 1)  # the current is timed too, but compiled already
        return additive(10.0, cost)(subsets)

    search = run(LeaveOneOut(kinds), measure)
    assert search.candidates_timed == sum(asked) == 18
    assert search.stopped == "trial bound (18 subsets)"
    # all nine, then the eight left, then the one whose removal gained most in step 2: the budget is spent
    assert asked == [9, 8, 1] and search.current == tuple(kinds[:6])
    assert search.chosen_trial().ms == pytest.approx(10.0 + sum(cost[k] for k in kinds[:6]))


def test_kinds_whose_removal_hurt_in_every_round_are_not_tried_again():
    cost = {"a": -3.0, "b": +1.0, "c": -2.0, "d": +0.5}
    tried = []

    def measure(subsets):
        tried.append(subsets[1:])
        return additive(20.0, cost)(subsets)

    search = run(LeaveOneOut(list(cost)), measure)
    assert search.current == ("a", "c")
    assert len(tried[0]) == 4  # step 1: all four
    assert tried[1] == [("a", "c")]  # step 2: only d (a and c were needed)
    assert tried[2:] == []  # then only a and c are left, both needed: no third step
    assert search.candidates_timed == 5


def test_the_time_budget_cuts_a_step_to_what_fits_and_tries_the_most_promising_first():
    kinds = ["a", "b", "c", "d", "e"]
    cost = {"a": 0.3, "b": 2.0, "c": 0.5, "d": 1.0, "e": 0.2}
    clock = {"s": 0.0}
    search = LeaveOneOut(kinds)
    tried = []

    def measure(subsets):
        tried.append([next(k for k in search.current if k not in s) for s in subsets[1:]])
        return additive(10.0, cost)(subsets)

    budget = 75.0
    while not search.done:
        cands = search.candidates(budget - clock["s"])
        if search.done:
            break
        clock["s"] += 10.0 * len(cands)  # a compile costs 10 s
        search.record(measure([search.current] + cands), seconds=10.0 * len(cands))
    # step 1: all five (50 s); b goes. 25 s left: two subsets, those whose removal gained most (d, then c)
    assert tried == [["a", "b", "c", "d", "e"], ["d", "c"]]
    assert search.current == ("a", "c", "e") and search.stopped == "time budget"


def test_a_subset_that_fails_is_never_chosen_and_a_failing_whole_finds_a_part_that_works():
    cost = {"a": -1.0, "b": -1.0, "c": -1.0}

    def measure(subsets):  # any subset with c fails to compile; faster ones exist without it
        return {s: (None if "c" in s else additive(10.0, cost)([s])[s]) for s in subsets}

    search = run(LeaveOneOut(list(cost)), measure)
    assert search.current == ("a", "b") and search.chosen_trial().ms == pytest.approx(8.0)
    assert search.trials[0].ms is None  # the whole (a, b, c) failed
    assert search.stopped == "no kind's removal helped beyond the noise"

    everything_fails = run(LeaveOneOut(["a", "b"]), lambda subsets: {s: None for s in subsets})
    assert everything_fails.stopped == "every subset tried failed" and everything_fails.chosen_trial().ms is None


def test_one_kind_is_never_dropped_and_no_kind_is_no_search():
    one = LeaveOneOut(["rmsnorm"])
    assert one.candidates() == [] and one.done and one.stopped == "one kind left" and one.current == ("rmsnorm",)
    none = LeaveOneOut([])
    assert none.done and none.candidates() == []
