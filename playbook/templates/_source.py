"""Helpers for writing candidate source: fill markers, indent fragments, shared launcher snippets.

Rendered files must stand alone (they are exported without this tool), so shared helpers are
pasted in as source text, never imported.
"""

from __future__ import annotations

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
