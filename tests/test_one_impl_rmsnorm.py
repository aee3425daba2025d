"""RMSNorm has one Triton implementation: the starter is the playbook template at its defaults, and a
knob move is a one-line change of a module constant the starter reads."""

from __future__ import annotations

import difflib
import importlib.util
import inspect

from autokernel.kernels import get_spec
from autokernel.playbook.templates import get_template

TEMPLATE = get_template("rmsnorm")
STARTER = get_spec("rmsnorm").starters["triton"]


def _starter_module():
    spec = importlib.util.spec_from_file_location("rmsnorm_starter", STARTER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_template_at_its_defaults_is_the_starter_byte_for_byte():
    assert TEMPLATE.render(TEMPLATE.DEFAULTS) == STARTER.read_text()


def test_the_defaults_are_the_starters_constants():
    starter = _starter_module()
    assert TEMPLATE.DEFAULTS == {knob.name: getattr(starter, knob.constant) for knob in TEMPLATE.SPACE}


def test_the_template_carries_no_kernel_source():
    text = inspect.getsource(TEMPLATE)
    assert "@triton.jit" not in text and "fill(" not in text and "tl." not in text


def test_every_single_knob_move_changes_only_its_constant_line():
    base = STARTER.read_text().splitlines()
    for knob in TEMPLATE.SPACE:
        for value in knob.values:
            if value == TEMPLATE.DEFAULTS[knob.name]:
                continue
            moved = TEMPLATE.render({**TEMPLATE.DEFAULTS, knob.name: value}).splitlines()
            changed = [line for line in difflib.unified_diff(base, moved, lineterm="", n=0)
                       if line[:1] in "+-" and not line.startswith(("+++", "---"))]
            assert len(changed) == 2 and changed[1].startswith(f"+{knob.constant} = {value!r}"), changed
