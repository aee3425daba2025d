"""Cross-entropy has one Triton implementation: the starter is the playbook template at its defaults, and
every knob move is a one-line change of a module constant that the starter reads, run and compiled here."""

from __future__ import annotations

from one_impl_support import failures_under_interpreter, sm90_compile_errors
from template_is_starter import assert_the_template_is_the_starter
from test_playbook import _single_moves

from autokernel.playbook.templates import get_template

TEMPLATE = get_template("cross_entropy")
# A row in one tile and in a loop, at odd vocabularies (the aligned window reads all rows but the last),
# one row alone (the window's plain last row), and more rows than a persistent grid has programs.
SHAPES = [{"rows": 1, "vocab": 1}, {"rows": 3, "vocab": 7}, {"rows": 5, "vocab": 4097}, {"rows": 37, "vocab": 1001}]


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("cross_entropy")


def test_every_single_knob_move_matches_the_reference_under_the_interpreter():
    assert failures_under_interpreter("cross_entropy", [params for _, params in _single_moves(TEMPLATE)], SHAPES) == []


# A move of every knob that changes the kernel's code, compiled at bf16 at an aligned and an odd vocabulary
# (a compile for sm_90 takes seconds, so not every value: warps and tile caps are numbers the compiler is given).
HOPPER_MOVES = [{"num_stages": 3}, {"rows_per_program": 2}, {"persistent": 2}, {"load_eviction": "evict_last"},
                {"aligned_window": True}, {"exp2": False}, {"online": False}, {"autotune": True}, {"tma": True},
                {"target_from_tile": True}]


def test_a_move_of_every_knob_compiles_for_hopper():
    moves = [{**TEMPLATE.DEFAULTS, **move} for move in HOPPER_MOVES]
    calls = [[[[4096, 32000], "bfloat16"], [[4096], "int64"]], [[[1024, 50257], "bfloat16"], [[1024], "int64"]]]
    assert sm90_compile_errors("cross_entropy", moves, calls) == {}
