"""LayerNorm has one Triton implementation: the playbook's template is the starter with other knob values.

The starter's launches at its defaults are the measured ones, so the template at its defaults must be
that file byte for byte, and every single knob move must still compute (x - mean) * rsqrt(var + eps)
* weight + bias within the spec.
"""

from __future__ import annotations

import pytest

from autokernel.playbook.templates import get_template
from template_is_starter import assert_the_template_is_the_starter, failed_moves
from test_playbook import _check_under_interpreter, _single_moves

TEMPLATE = get_template("layernorm")


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("layernorm")


def test_one_pass_statistics_act_only_on_looped_rows_and_the_one_pass_rows_knobs_only_on_rows_that_fit():
    fits = TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 8192, "cols": 4096}, "bf16")
    assert fits["one_pass_stats"] is None and fits["load_eviction"] == "evict_last" and fits["rows_per_program"] == 0
    wide = TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 256, "cols": 20000}, "bf16")
    assert wide["one_pass_stats"] is False
    assert all(wide[name] is None for name in ("rows_per_program", "persistent", "load_eviction", "tma", "even_masks"))


@pytest.fixture(scope="module")
def every_move_checked():
    """Each single move in one interpreter process, on the spec's smoke and edge shapes and a non-contiguous x
    (the split path has its own check in tests/test_split_rows.py)."""
    jobs = [(f"{knob.name}={params[knob.name]!r}", "layernorm", [params], False) for knob, params in _single_moves(TEMPLATE)]
    return _check_under_interpreter(jobs)


def test_every_single_knob_move_computes_the_reference_under_the_interpreter(every_move_checked):
    assert failed_moves(every_move_checked) == {}
