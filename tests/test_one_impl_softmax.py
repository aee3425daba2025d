"""Softmax has one Triton implementation: the starter is the playbook template at its defaults, and every
knob move is a one-line change of a module constant that the starter reads, run and compiled here."""

from __future__ import annotations

import inspect

from one_impl_support import failures_under_interpreter, single_moves, sm90_compile_errors, starter_module

from autokernel.kernels import get_spec
from autokernel.playbook.templates import get_template

TEMPLATE = get_template("softmax")
STARTER = get_spec("softmax").starters["triton"]
# Each path of the starter and of its moves: narrow rows several per program, rows of 16385..32768 columns
# whole (one 1-D row per program at the defaults), wider rows looped; a tile cap of 1024 loops the others.
SHAPES = [{"rows": 1, "cols": 1}, {"rows": 5, "cols": 37}, {"rows": 3, "cols": 1500}, {"rows": 1, "cols": 16385},
          {"rows": 2, "cols": 33000}]


def test_the_template_at_its_defaults_is_the_starter_byte_for_byte():
    assert TEMPLATE.render(TEMPLATE.DEFAULTS) == STARTER.read_text()


def test_the_defaults_are_the_starters_constants():
    starter = starter_module("softmax")
    assert TEMPLATE.DEFAULTS == {knob.name: getattr(starter, knob.constant) for knob in TEMPLATE.SPACE}


def test_the_template_carries_no_kernel_source():
    text = inspect.getsource(TEMPLATE)
    assert "@triton.jit" not in text and "fill(" not in text and "tl." not in text


def test_every_single_knob_move_matches_the_reference_under_the_interpreter():
    assert failures_under_interpreter("softmax", single_moves(TEMPLATE), SHAPES) == []


# A move of every knob that changes a kernel's code, compiled on each path at bf16 (a compile for sm_90 takes
# seconds, so not every value: warps and tile caps only change numbers the compiler is given anyway).
HOPPER_MOVES = [{"num_stages": 3}, {"rows_per_program": 2}, {"persistent": 0}, {"load_eviction": "evict_last"},
                {"backwards": False}, {"exp2": False}, {"online": False}, {"autotune": True}, {"tma": True},
                {"reciprocal": True}]


def test_a_move_of_every_knob_compiles_for_hopper():
    moves = [{**TEMPLATE.DEFAULTS, **move} for move in HOPPER_MOVES]
    calls = [[[[4096, 4096], "bfloat16"]], [[[1024, 20000], "bfloat16"]], [[[64, 65536], "bfloat16"]]]
    assert sm90_compile_errors("softmax", moves, calls) == {}
