"""Matmul has one Triton implementation: the starter is the playbook template at its defaults, and a knob
move is a one-line change of a module constant the starter reads (the launch code or a kernel constexpr)."""

from __future__ import annotations

import pytest

from autokernel.playbook.templates import get_template
from template_is_starter import assert_the_template_is_the_starter, starter_module
from test_playbook import _check_under_interpreter, _single_moves

TEMPLATE = get_template("matmul")


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("matmul")


def test_effective_knows_where_the_starter_stops_autotuning_and_how_small_its_tiles_get():
    starter = starter_module("matmul")
    assert TEMPLATE._AUTOTUNE_MIN_WORK == starter.AUTOTUNE_MIN_WORK
    assert TEMPLATE._SMALLEST_BLOCK == min(t[i] for t in (*starter.TUNED_TILES, starter.SMALL_TILE) for i in (0, 1))


def test_a_tile_knob_replaces_its_part_of_every_tile_and_none_keeps_the_lists():
    starter = starter_module("matmul")
    assert [starter._with_knobs(t) for t in starter.TUNED_TILES] == starter.TUNED_TILES
    starter.BLOCK_K, starter.NUM_STAGES = 128, 2
    assert starter._with_knobs((64, 64, 32, 4, 3)) == (64, 64, 128, 4, 2)


def test_moves_that_change_nothing_at_the_shape_are_told():
    big, small = {"M": 4096, "N": 4096, "K": 4096}, {"M": 64, "N": 64, "K": 64}
    assert TEMPLATE.effective(TEMPLATE.DEFAULTS, big, "bf16")["autotune"] is True
    assert TEMPLATE.effective(TEMPLATE.DEFAULTS, small, "bf16")["autotune"] is None  # one tile either way
    assert TEMPLATE.effective(TEMPLATE.DEFAULTS, small, "bf16")["group_m"] is None  # one 64x64 tile
    assert TEMPLATE.effective({**TEMPLATE.DEFAULTS, "block_m": 32}, small, "bf16")["group_m"] == 8
    assert TEMPLATE.effective(TEMPLATE.DEFAULTS, big, "bf16")["input_precision"] is None
    assert TEMPLATE.effective(TEMPLATE.DEFAULTS, big, "fp32")["input_precision"] == "ieee"


@pytest.fixture(scope="module")
def every_move_checked():
    """Each single move on the spec's smoke and edge shapes in both dtypes and a non-contiguous input, in
    one interpreter process."""
    jobs = [(f"{knob.name}={params[knob.name]!r}", "matmul", [params], False) for knob, params in _single_moves(TEMPLATE)]
    return _check_under_interpreter(jobs)


def test_every_single_knob_move_computes_the_reference_under_the_interpreter(every_move_checked):
    assert len(every_move_checked) == sum(len(k.values) - 1 for k in TEMPLATE.SPACE)
    assert {name: failures for name, failures in every_move_checked.items() if failures} == {}
