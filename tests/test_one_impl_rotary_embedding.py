"""Rotary embedding has one Triton implementation: the playbook's template is the starter with other knob values.

The starter's launches at its defaults are the measured ones, so the template at its defaults must be
that file byte for byte, and every single knob move must still compute the rotation within the spec,
on the flat path and (with `flat` off, as the agent reaches the tiled knobs) on the tiled one.
"""

from __future__ import annotations

import pytest

from autokernel.playbook.templates import get_template
from template_is_starter import assert_the_template_is_the_starter, failed_moves
from test_playbook import _check_under_interpreter, _single_moves

TEMPLATE = get_template("rotary_embedding")


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("rotary_embedding")


def test_the_tiled_knobs_act_once_the_flat_path_is_off():
    shape = {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 128}
    flat = TEMPLATE.effective(TEMPLATE.DEFAULTS, shape, "bf16")
    assert all(flat[name] is None for name in TEMPLATE.TILED_ONLY) and flat["num_warps"] == 0
    tiled = TEMPLATE.effective({**TEMPLATE.DEFAULTS, "flat": False}, shape, "bf16")
    assert all(tiled[name] == TEMPLATE.DEFAULTS[name] for name in TEMPLATE.TILED_ONLY)


@pytest.fixture(scope="module")
def every_move_checked():
    """Each single move, and each move of a tiled knob with `flat` off, in one interpreter process: the spec's
    smoke and edge shapes, its sweep shapes that fit the interpreter, every input regime and a strided x."""
    jobs = [(f"{knob.name}={params[knob.name]!r}", "rotary_embedding", [params], True)
            for knob, params in _single_moves(TEMPLATE)]
    jobs += [(f"flat=False {knob.name}={params[knob.name]!r}", "rotary_embedding", [{**params, "flat": False}], True)
             for knob, params in _single_moves(TEMPLATE) if knob.name in TEMPLATE.TILED_ONLY]
    return _check_under_interpreter(jobs)


def test_every_single_knob_move_computes_the_reference_under_the_interpreter(every_move_checked):
    assert failed_moves(every_move_checked) == {}
