"""A candidate of the playbook is its kernel type's Triton starter with other values for its knob constants.

The starter is the one implementation (kernels/<type>/starter_triton.py): every knob is a one-line module
constant there, so a move is a one-line diff the user can read, and a rendered file stands alone as the
starter does.
"""

from __future__ import annotations

import ast
import re


# -- one implementation: a candidate is the kernel type's Triton starter with other knob values ------------

_ASSIGNMENT = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)(?P<annotation>\s*:\s*[^=]+?)?\s*=\s*(?P<value>.*?)(?P<comment>\s+#.*)?$")


def set_constants(source: str, values: dict[str, object]) -> str:
    """`source` with the module-level constant of each `values` key (`NUM_WARPS = 8`) set to repr(value), on
    one line, its trailing comment kept. KeyError names a constant the file does not define on one line: a
    knob that the implementation does not read must not look as if it moved."""
    lines = source.split("\n")
    left = dict(values)
    for i, line in enumerate(lines):
        m = _ASSIGNMENT.match(line)
        if m and m.group("name") in left and _complete(m.group("value")):
            value = left.pop(m.group("name"))
            lines[i] = f"{m.group('name')}{m.group('annotation') or ''} = {value!r}{m.group('comment') or ''}"
    if left:
        raise KeyError(f"no one-line module constant {', '.join(sorted(left))} in the source")
    return "\n".join(lines)


def _complete(expression: str) -> bool:
    try:
        ast.parse(expression, mode="eval")
    except SyntaxError:
        return False
    return True


def starter_source(kernel: str, backend: str = "triton") -> str:
    """The text of a kernel type's starter: the one implementation its template's knobs move."""
    from autokernel.kernels import get_spec

    return get_spec(kernel).starters[backend].read_text()


def render_starter(kernel: str, space: tuple, params: dict) -> str:
    """The starter of `kernel` with each knob of `space` set to `params`' value (its constant: `Knob.constant`).
    At the template's defaults this is the starter itself, byte for byte."""
    return set_constants(starter_source(kernel), {knob.constant: params[knob.name] for knob in space})
