"""Checks of a kernel type's one Triton implementation beside tests/template_is_starter.py, shared by
tests/test_one_impl_softmax.py and tests/test_one_impl_cross_entropy.py: knob moves run under the interpreter
on shapes that reach every path of the starter, against the spec's reference, and compiled for sm_90 offline
(through the checks test_playbook and test_kernel_library already have)."""

from __future__ import annotations

import json


def failures_under_interpreter(kernel: str, moves: list[dict], shapes: list[dict]) -> list:
    """The moves that miss the spec's reference on one of `shapes` (fp32 and bf16, normal inputs), by
    test_playbook's interpreter check, in one process for all."""
    from test_playbook import _check_under_interpreter

    return _check_under_interpreter([(kernel, kernel, moves, False, shapes)], timeout=900)[kernel]


def sm90_compile_errors(kernel: str, moves: list[dict], calls: list[list]) -> dict:
    """{move and call: error} for the moves whose launches fail to compile for sm_90, each move called with
    every argument list of `calls` ([shape, dtype name] per argument); skips where Triton cannot target sm_90."""
    from test_kernel_library import compile_for_hopper

    return compile_for_hopper([(f"{json.dumps(move, sort_keys=True)} {args}", kernel, move, args)
                               for move in moves for args in calls])
