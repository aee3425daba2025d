"""Attention has one Triton implementation: the starter is the playbook template at its defaults, and a knob
move is a one-line change of a module constant the starter reads (the launch code or a kernel constexpr)."""

from __future__ import annotations

import pytest

from autokernel.playbook.templates import get_template
from template_is_starter import assert_the_template_is_the_starter
from test_playbook import _check_under_interpreter, _single_moves

TEMPLATE = get_template("flash_attention")


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("flash_attention")


@pytest.fixture(scope="module")
def every_move_checked():
    """Each single move on the spec's smoke and edge shapes (causal and not) in both dtypes and a
    non-contiguous input, in one interpreter process; and query tiles narrower than the key tiles, which
    the starter's own tiles never are."""
    jobs = [(f"{knob.name}={params[knob.name]!r}", "flash_attention", [params], False) for knob, params in _single_moves(TEMPLATE)]
    jobs.append(("narrow query tiles", "flash_attention", [{**TEMPLATE.DEFAULTS, "block_m": 16, "block_n": 64}], False))
    return _check_under_interpreter(jobs)


def test_every_single_knob_move_computes_the_reference_under_the_interpreter(every_move_checked):
    assert len(every_move_checked) == 1 + sum(len(k.values) - 1 for k in TEMPLATE.SPACE)
    assert {name: failures for name, failures in every_move_checked.items() if failures} == {}
