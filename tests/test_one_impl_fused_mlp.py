"""The SwiGLU MLP has one Triton implementation: the starter is the playbook template at its defaults, and a
knob move is a one-line change of a module constant the starter reads (the launch code or a kernel constexpr)."""

from __future__ import annotations

import pytest

from autokernel.playbook.templates import get_template
from template_is_starter import assert_the_template_is_the_starter
from test_playbook import _check_under_interpreter, _single_moves

TEMPLATE = get_template("fused_mlp")


def test_the_template_is_the_starter_at_its_defaults_and_a_move_is_one_constant():
    assert_the_template_is_the_starter("fused_mlp")


def test_the_interleaving_is_a_no_op_where_the_descriptor_kernels_run():
    llama = {"tokens": 4096, "hidden": 2048, "intermediate": 5632}
    assert TEMPLATE.effective(TEMPLATE.DEFAULTS, llama, "bf16")["interleaved"] is None
    assert TEMPLATE.effective({**TEMPLATE.DEFAULTS, "tma": False}, llama, "bf16")["interleaved"] is True
    assert TEMPLATE.effective(TEMPLATE.DEFAULTS, {**llama, "hidden": 2047}, "bf16")["interleaved"] is True
    fp32 = TEMPLATE.effective(TEMPLATE.DEFAULTS, llama, "fp32")
    assert fp32["tma"] is None and fp32["h_fp32"] is None and fp32["interleaved"] is True


@pytest.fixture(scope="module")
def every_move_checked():
    """Each single move on the spec's smoke and edge shapes in both dtypes and a non-contiguous input, in
    one interpreter process (bf16 takes the descriptor kernels there, fp32 the pointer ones)."""
    jobs = [(f"{knob.name}={params[knob.name]!r}", "fused_mlp", [params], False) for knob, params in _single_moves(TEMPLATE)]
    jobs.append(("pointer kernels, two dots", "fused_mlp", [{**TEMPLATE.DEFAULTS, "tma": False, "interleaved": False}], False))
    return _check_under_interpreter(jobs)


def test_every_single_knob_move_computes_the_reference_under_the_interpreter(every_move_checked):
    assert len(every_move_checked) == 1 + sum(len(k.values) - 1 for k in TEMPLATE.SPACE)
    assert {name: failures for name, failures in every_move_checked.items() if failures} == {}
