"""Reduce has one Triton implementation: the playbook's template is the starter with other knob values.

The starter's launches at its defaults are the measured ones, so the template at its defaults must be
that file byte for byte, and every single knob move must still compute x.sum(-1) within the spec.
"""

from __future__ import annotations

import pytest

from autokernel.playbook.templates import get_template
from template_is_starter import assert_the_template_is_the_starter, failed_moves, starter_module
from test_playbook import _check_under_interpreter, _single_moves

TEMPLATE = get_template("reduce")


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("reduce")
    assert TEMPLATE.SPLIT_MIN_COLS == starter_module("reduce").SPLIT_MIN_COLS


def test_the_rule_and_a_fixed_split_are_told_apart_by_width():
    narrow = TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 8192, "cols": 4096}, "bf16")
    assert narrow["split"] == 1  # rows this narrow are never split: the rule and "never" are the same kernel
    wide = TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 16, "cols": 1 << 22}, "bf16")
    assert wide["split"] == 0 and wide["rows_per_program"] == 0
    fixed = TEMPLATE.effective({**TEMPLATE.DEFAULTS, "split": 4}, {"rows": 16, "cols": 4096}, "bf16")
    assert fixed["split"] == 4 and fixed["rows_per_program"] is None and fixed["persistent"] is None


@pytest.fixture(scope="module")
def every_move_checked():
    """Each single move in one interpreter process: the spec's smoke and edge shapes, its sweep shapes that
    fit the interpreter, every input regime and a non-contiguous x."""
    jobs = [(f"{knob.name}={params[knob.name]!r}", "reduce", [params], True) for knob, params in _single_moves(TEMPLATE)]
    return _check_under_interpreter(jobs)


def test_every_single_knob_move_computes_the_reference_under_the_interpreter(every_move_checked):
    assert every_move_checked["acc_fp32=False"], "bf16 sums of 1024 elements should miss the reference"
    assert failed_moves(every_move_checked) == {}
