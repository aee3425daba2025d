"""Cross-entropy has one Triton implementation: the starter is the playbook template at its defaults, and
every knob move is a one-line change of a module constant that the starter reads, run and compiled here."""

from __future__ import annotations

import inspect

from one_impl_support import failures_under_interpreter, single_moves, sm90_compile_errors, starter_module

from autokernel.kernels import get_spec
from autokernel.playbook.templates import get_template

TEMPLATE = get_template("cross_entropy")
STARTER = get_spec("cross_entropy").starters["triton"]
# A row in one tile and in a loop, at odd vocabularies (the aligned window reads all rows but the last),
# one row alone (the window's plain last row), and more rows than a persistent grid has programs.
SHAPES = [{"rows": 1, "vocab": 1}, {"rows": 3, "vocab": 7}, {"rows": 5, "vocab": 4097}, {"rows": 37, "vocab": 1001}]


def test_the_template_at_its_defaults_is_the_starter_byte_for_byte():
    assert TEMPLATE.render(TEMPLATE.DEFAULTS) == STARTER.read_text()


def test_the_defaults_are_the_starters_constants():
    starter = starter_module("cross_entropy")
    assert TEMPLATE.DEFAULTS == {knob.name: getattr(starter, knob.constant) for knob in TEMPLATE.SPACE}


def test_the_template_carries_no_kernel_source():
    text = inspect.getsource(TEMPLATE)
    assert "@triton.jit" not in text and "fill(" not in text and "tl." not in text


def test_every_single_knob_move_matches_the_reference_under_the_interpreter():
    assert failures_under_interpreter("cross_entropy", single_moves(TEMPLATE), SHAPES) == []


# A move of every knob that changes the kernel's code, compiled at bf16 at an aligned and an odd vocabulary
# (a compile for sm_90 takes seconds, so not every value: warps and tile caps are numbers the compiler is given).
HOPPER_MOVES = [{"num_stages": 3}, {"rows_per_program": 2}, {"persistent": 2}, {"load_eviction": "evict_last"},
                {"aligned_window": True}, {"exp2": False}, {"online": False}, {"autotune": True}, {"tma": True},
                {"target_from_tile": True}]


def test_a_move_of_every_knob_compiles_for_hopper():
    moves = [{**TEMPLATE.DEFAULTS, **move} for move in HOPPER_MOVES]
    calls = [[[[4096, 32000], "bfloat16"], [[4096], "int64"]], [[[1024, 50257], "bfloat16"], [[1024], "int64"]]]
    assert sm90_compile_errors("cross_entropy", moves, calls) == {}
