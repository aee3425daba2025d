"""RMSNorm has one Triton implementation: the playbook's template is the starter with other knob values.

The starter's launches at its defaults are the measured ones, so the template at its defaults must be
that file byte for byte, and every single knob move must still compute x * rsqrt(mean(x^2) + eps) * weight within the spec.
"""

from __future__ import annotations

import pytest

from autokernel.playbook.templates import get_template
from template_is_starter import assert_the_template_is_the_starter, failed_moves
from test_playbook import _check_under_interpreter, _single_moves

TEMPLATE = get_template("rmsnorm")


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("rmsnorm")


def test_the_one_pass_rows_knobs_are_no_ops_for_looped_rows():
    wide = TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 256, "cols": 20000}, "bf16")
    assert all(wide[name] is None for name in ("rows_per_program", "persistent", "load_eviction", "tma", "even_masks"))
    fits = TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 8192, "cols": 4096}, "bf16")
    assert fits["rows_per_program"] == 0 and fits["load_eviction"] == "evict_last" and fits["acc_fp32"] is True
    assert TEMPLATE.effective(TEMPLATE.DEFAULTS, {"rows": 8192, "cols": 4096}, "fp32")["acc_fp32"] is None


@pytest.fixture(scope="module")
def every_move_checked():
    """Each single move in one interpreter process, on the spec's smoke and edge shapes and a non-contiguous x
    (the split path has its own check in tests/test_split_rows.py)."""
    jobs = [(f"{knob.name}={params[knob.name]!r}", "rmsnorm", [params], False) for knob, params in _single_moves(TEMPLATE)]
    return _check_under_interpreter(jobs)


def test_every_single_knob_move_computes_the_reference_under_the_interpreter(every_move_checked):
    assert failed_moves(every_move_checked) == {}
