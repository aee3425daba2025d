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
