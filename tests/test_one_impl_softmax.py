"""Softmax has one Triton implementation: the starter is the playbook template at its defaults, and every
knob move is a one-line change of a module constant that the starter reads, run and compiled here."""

from __future__ import annotations

from one_impl_support import failures_under_interpreter, sm90_compile_errors
from template_is_starter import assert_the_template_is_the_starter
from test_playbook import _single_moves

from autokernel.playbook.templates import get_template

TEMPLATE = get_template("softmax")
# Each path of the starter and of its moves: narrow rows several per program, rows of 16385..32768 columns
# whole (one 1-D row per program at the defaults), wider rows looped; a tile cap of 1024 loops the others.
SHAPES = [{"rows": 1, "cols": 1}, {"rows": 5, "cols": 37}, {"rows": 3, "cols": 1500}, {"rows": 1, "cols": 16385},
          {"rows": 2, "cols": 33000}]


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("softmax")


def test_every_single_knob_move_matches_the_reference_under_the_interpreter():
    assert failures_under_interpreter("softmax", [params for _, params in _single_moves(TEMPLATE)], SHAPES) == []


# A move of every knob that changes a kernel's code, compiled on each path at bf16 (a compile for sm_90 takes
# seconds, so not every value: warps and tile caps only change numbers the compiler is given anyway).
HOPPER_MOVES = [{"num_stages": 3}, {"rows_per_program": 2}, {"persistent": 0}, {"load_eviction": "evict_last"},
                {"backwards": False}, {"exp2": False}, {"online": False}, {"autotune": True}, {"tma": True},
                {"reciprocal": True}]


def test_a_move_of_every_knob_compiles_for_hopper():
    moves = [{**TEMPLATE.DEFAULTS, **move} for move in HOPPER_MOVES]
    calls = [[[[4096, 4096], "bfloat16"]], [[[1024, 20000], "bfloat16"]], [[[64, 65536], "bfloat16"]]]
    assert sm90_compile_errors("softmax", moves, calls) == {}


def test_the_knobs_of_a_path_the_shape_does_not_take_are_no_ops():
    whole = TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 4096, "cols": 4096}, "bf16")
    assert all(whole[name] is None for name in ("online", "backwards", "persistent", "num_stages"))
    assert whole["max_block_n"] == 4096 and whole["rows_per_program"] == 0
    looped = TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 1024, "cols": 131072}, "bf16")
    assert looped["rows_per_program"] is None and looped["tma"] is None and looped["max_block_n"] == 16384
    assert looped["online"] is True and looped["persistent"] == 1
