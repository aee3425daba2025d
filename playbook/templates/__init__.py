"""Parameterised Triton candidates, one module per kernel type.

Each module defines `KERNEL`, `METRIC` ("GB/s" or "TFLOP/s"), `SPACE` (a tuple of `Knob`, each tagged
with its playbook tier and the reason a move could pay), `DEFAULTS` (the starter's own values) and
`render(params) -> str`: the type's Triton starter, its one implementation, with those knob constants
set (`_source.render_starter`), so `render(DEFAULTS)` is the starter itself. Optional:
`effective(params, shape, dtype) -> dict` maps params to what actually changes the compiled kernel at a
shape and dtype (so the agent does not spend an experiment on a move that is a no-op there).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# Kernel types that have a template, in the order of priority.
TEMPLATE_KERNELS = (
    "rmsnorm",
    "softmax",
    "cross_entropy",
    "layernorm",
    "reduce",
    "rotary_embedding",
    "matmul",
    "fused_mlp",
    "flash_attention",
)


@dataclass(frozen=True)
class Knob:
    """One dimension of a template's space of variants.

    `values` are in a meaningful order (ascending for numbers), so the agent can try the
    neighbours of the current value first. `why` is the reason a move along this knob could pay;
    it is formatted with `old`, `new` and the target shape's keys when the agent writes a
    hypothesis.
    """

    name: str
    tier: int
    values: tuple
    why: str
    ordered: bool = True  # False: categorical (every other value is a neighbour)
    why_down: str = ""  # the reason for a move to a smaller value, where it differs from `why`

    def reason(self, old: Any, new: Any) -> str:
        """The unformatted reason for moving from `old` to `new`."""
        if self.why_down and self.ordered and old in self.values and new in self.values:
            if self.values.index(new) < self.values.index(old):
                return self.why_down
        return self.why

    @property
    def constant(self) -> str:
        """The module-level constant this knob becomes in the rendered source."""
        return self.name.upper()


def _folder_template(kernel: str) -> ModuleType | None:
    """A kernel type's own template (`kernels/<type>/template.py`), so a type added as one folder,
    inside the library or outside it (AUTOKERNEL_KERNEL_DIRS), is searched by the playbook agent too."""
    from autokernel.kernels import hook

    return hook(kernel, "template")


def available() -> list[str]:
    """Kernel types with a template in this build: the playbook's, then those kernel folders carry."""
    out = []
    for name in TEMPLATE_KERNELS:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"{__name__}.{name}":
                continue
            raise
        out.append(name)
    from autokernel.kernels import hooks

    return out + [name for name, _ in hooks("template") if name not in out]


def get_template(kernel: str) -> ModuleType:
    """The template module of a kernel type; ValueError if the playbook has none for it."""
    if kernel not in TEMPLATE_KERNELS:
        module = _folder_template(kernel)
        if module is None:
            raise ValueError(f"the playbook has no template for kernel {kernel!r}; it has: {', '.join(available())}")
        return module
    try:
        return importlib.import_module(f"{__name__}.{kernel}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{kernel}":
            raise ValueError(f"the playbook has no template for kernel {kernel!r} in this build") from None
        raise


def complete(template: ModuleType, params: dict[str, Any] | None) -> dict[str, Any]:
    """`params` over the template's defaults, keeping only known knobs (a starter's {} -> DEFAULTS)."""
    out = dict(template.DEFAULTS)
    for key, value in (params or {}).items():
        if key in out:
            out[key] = value
    return out


def effective(template: ModuleType, params: dict[str, Any], shape: dict | None, dtype: str = "") -> dict[str, Any]:
    """What the params mean at `shape` and `dtype` (identity when the template does not say)."""
    fn = getattr(template, "effective", None)
    full = complete(template, params)
    return fn(full, shape or {}, dtype) if fn else full


def next_power_of_2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()
