"""The kernel library: one sub-package per kernel type, each exporting `SPEC` (a KernelSpec)."""

from __future__ import annotations

import importlib

from .spec import KernelSpec

# Kernel types in the order they are listed; each lives in kernels/<name>/ with its starters.
KERNEL_NAMES = (
    "matmul",
    "softmax",
    "layernorm",
    "rmsnorm",
    "flash_attention",
    "fused_mlp",
    "cross_entropy",
    "rotary_embedding",
    "reduce",
)


def available() -> list[str]:
    """The kernel types whose package is present (all nine once the library is complete)."""
    out = []
    for name in KERNEL_NAMES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"{__name__}.{name}":
                continue
            raise
        # A folder holding only starters (no __init__.py yet) imports as a namespace package.
        if hasattr(module, "SPEC"):
            out.append(name)
    return out


def get_spec(name: str) -> KernelSpec:
    """The spec of a kernel type by name; ValueError naming the known ones otherwise."""
    if name not in KERNEL_NAMES:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(available())}")
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}":
            raise ValueError(f"kernel {name!r} is not in this build; known: {', '.join(available())}") from None
        raise
    if not hasattr(module, "SPEC"):
        raise ValueError(f"kernel {name!r} is not in this build; known: {', '.join(available())}")
    return module.SPEC


def all_specs() -> list[KernelSpec]:
    return [get_spec(n) for n in available()]
