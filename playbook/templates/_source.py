"""Helpers for writing candidate source: fill markers, indent fragments, shared launcher snippets.

Rendered files must stand alone (they are exported without this tool), so shared helpers are
pasted in as source text, never imported.
"""

from __future__ import annotations

import ast
import re
import textwrap


def fill(text: str, **values: object) -> str:
    """Dedent `text`, then replace `<<name>>` markers (braces stay free for the generated Python).

    A marker alone on its line is replaced by a multi-line fragment indented to the marker's
    column; a marker inside a line is replaced inline.
    """
    text = textwrap.dedent(text).strip("\n")
    out = []
    for line in text.split("\n"):
        alone = re.fullmatch(r"(\s*)<<([A-Za-z_]\w*)>>", line)
        if alone and alone.group(2) in values:
            fragment = textwrap.dedent(str(values[alone.group(2)])).strip("\n")
            if fragment:
                out.append(textwrap.indent(fragment, alone.group(1)))
            continue
        for key, value in values.items():
            line = line.replace(f"<<{key}>>", str(value))
        out.append(line)
    text = "\n".join(out)
    left = re.search(r"<<([A-Za-z_]\w*)>>", text)
    if left:
        raise KeyError(f"unfilled marker {left.group(0)} in a template")
    return text


def block(text: str, indent: int = 0) -> str:
    """A dedented fragment, re-indented by `indent` spaces, without its surrounding blank lines."""
    return textwrap.indent(textwrap.dedent(text).strip("\n"), " " * indent)


def join(*parts: str | None) -> str:
    """Top-level fragments joined by two blank lines (PEP 8); None and empty parts dropped, and the
    standard-library imports the fragments did not use left out (the file is read by people)."""
    source = "\n\n\n".join(p.strip("\n") for p in parts if p) + "\n"
    for module in ("functools", "os"):
        line = f"import {module}\n"
        if line in source and f"{module}." not in source.replace(line, ""):
            source = source.replace(line, "", 1)
    return re.sub(r"\n{4,}", "\n\n\n", source)


def eviction_arg(policy: str) -> str:
    """`, eviction_policy="..."` for tl.load/tl.store, or nothing for the default."""
    return f', eviction_policy="{policy}"' if policy else ""


def cache_arg(modifier: str) -> str:
    return f', cache_modifier="{modifier}"' if modifier else ""


IMPORTS = block(
    """
    import functools
    import os

    import torch
    import triton
    import triton.language as tl
    """
)

# Programs per SM for persistent grids; on the CPU interpreter a small fixed number.
NUM_SMS = block(
    '''
    @functools.lru_cache(maxsize=None)
    def _num_sms(device: torch.device) -> int:
        """Streaming multiprocessors of the GPU (persistent grids are sized by it)."""
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).multi_processor_count
        return 4
    '''
)

# Tensor descriptors (TMA on Hopper): only where Triton has them, the GPU is sm_90+ and the
# layout meets TMA's 16-byte alignment rules; otherwise the pointer path is used.
TMA_READY = block(
    '''
    def _tma_ready(*tensors: torch.Tensor, block_cols: int = 16) -> bool:
        """True where tensor descriptors can be used for these 2-D tensors and tiles `block_cols` wide."""
        if not (hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator")):
            return False
        if block_cols * tensors[0].element_size() < 16:  # a descriptor's tile row must span 16 bytes
            return False
        t0 = tensors[0]
        if t0.is_cuda and torch.cuda.get_device_capability(t0.device)[0] < 9:
            return False
        for t in tensors:
            if t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16 or t.stride(-1) != 1:
                return False
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=t0.device))
        return True
    '''
)

INTERPRETER_NOTE = block(
    """
    # Running under the CPU interpreter (there autotune cannot time configs, so it gets one).
    _INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
    """
)


def autotune_decorator(configs: str, key: str) -> str:
    """`@triton.autotune` over `configs` (a list expression), cut to one config under the interpreter."""
    return fill(
        """
_CONFIGS = <<configs>>
if _INTERPRETED:
    _CONFIGS = _CONFIGS[:1]


@triton.autotune(configs=_CONFIGS, key=<<key>>)""",
        configs=configs,
        key=key,
    ).strip("\n")


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
