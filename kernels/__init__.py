"""The kernel library: one folder per kernel type, each exporting `SPEC` (a KernelSpec) and its hooks.

Kernel types are found, not listed: every package folder here, and in the folders named by the
AUTOKERNEL_KERNEL_DIRS environment variable (os.pathsep-separated; or `add_kernel_dirs`), whose
`__init__.py` defines `SPEC` is one. So a user or a test adds a type from outside the package, and a
subprocess (a worker) inherits it. A folder found outside imports as `autokernel.kernels.<name>`, so its
files may use the same relative imports (`from ..spec import KernelSpec`) as the library's own.

A type's optional hooks are modules in its folder, read by the engine without naming any type:
`recognise` (how the profiler attributes a model's operators and modules to it, and its shape) and
`route` (how the patch routes a model's calls to a kept kernel), and `template` (the playbook's space).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from .spec import KernelSpec

KERNEL_DIRS_ENV = "AUTOKERNEL_KERNEL_DIRS"
_HOME = str(Path(__file__).resolve().parent)
_listed: dict[str, tuple[str, ...]] = {}  # AUTOKERNEL_KERNEL_DIRS as set -> the types found then
_synced: list[str | None] = [None]  # the AUTOKERNEL_KERNEL_DIRS that __path__ follows
_hooked: dict[tuple[str, str], list] = {}  # (that, hook part) -> [(type, hook module)]


def kernel_dirs() -> list[str]:
    """The folders searched for kernel types: the library's own, then those the environment names."""
    extra = [str(Path(d).resolve()) for d in os.environ.get(KERNEL_DIRS_ENV, "").split(os.pathsep) if d]
    return list(dict.fromkeys([_HOME, *extra]))


def add_kernel_dirs(*dirs: str | os.PathLike) -> None:
    """Search `dirs` for kernel types too, in this process and in the subprocesses it starts."""
    old = [d for d in os.environ.get(KERNEL_DIRS_ENV, "").split(os.pathsep) if d]
    os.environ[KERNEL_DIRS_ENV] = os.pathsep.join(dict.fromkeys([*old, *(str(Path(d).resolve()) for d in dirs)]))


def _sync_path() -> list[str]:
    dirs = kernel_dirs()
    __path__[:] = dirs  # sub-packages import from exactly these folders, in this order
    _synced[0] = os.environ.get(KERNEL_DIRS_ENV, "")
    return dirs


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}":
            return None
        raise


def kernel_names() -> tuple[str, ...]:
    """The kernel types present, by SPEC.order then name (a stable listing: the library's nine first)."""
    key = os.environ.get(KERNEL_DIRS_ENV, "")
    if key not in _listed:
        found = {}
        for d in _sync_path():
            for folder in sorted(Path(d).iterdir()) if Path(d).is_dir() else ():
                name = folder.name
                if name in found or not name.isidentifier() or name.startswith("_") \
                        or not (folder / "__init__.py").is_file():
                    continue
                module = _import(name)
                if module is not None and isinstance(getattr(module, "SPEC", None), KernelSpec):
                    found[name] = module.SPEC.order
        _listed[key] = tuple(sorted(found, key=lambda n: (found[n], n)))
    elif _synced[0] != key:
        _sync_path()
    return _listed[key]


def __getattr__(attr: str):
    if attr == "KERNEL_NAMES":  # the kernel types found now (the tuple this module once spelt out)
        return kernel_names()
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def available() -> list[str]:
    """The kernel types whose package is present and defines SPEC, in listing order."""
    return list(kernel_names())


def get_spec(name: str) -> KernelSpec:
    """The spec of a kernel type by name; ValueError naming the known ones otherwise."""
    if name not in kernel_names():
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(available())}")
    return _import(name).SPEC


def all_specs() -> list[KernelSpec]:
    return [get_spec(n) for n in available()]


def hook(name: str, part: str) -> ModuleType | None:
    """The hook module `part` (recognise, route, template) of kernel type `name`, None if it has none."""
    if name not in kernel_names():
        return None
    try:
        return importlib.import_module(f"{__name__}.{name}.{part}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}.{part}":
            return None
        raise


def hooks(part: str) -> list[tuple[str, ModuleType]]:
    """(type, hook module) of every kernel type that has the hook `part`, in listing order."""
    key = (os.environ.get(KERNEL_DIRS_ENV, ""), part)
    if key not in _hooked:
        _hooked[key] = [(n, m) for n in kernel_names() if (m := hook(n, part)) is not None]
    return _hooked[key]


def patch_source(kinds=None) -> str:
    """The patcher (engine/kernel_patch.py) with the routes of `kinds` (every type that has one unless
    given) appended, each wrapped in a function of its own so their names stay apart: the one standalone
    text `autokernel export` ships as `_patch.py` and a KernelBench ModelNew inlines, run where autokernel
    is not installed. A route's imports of the patcher are dropped: its names are the text's globals."""
    import ast

    from autokernel.engine import kernel_patch

    parts = [Path(kernel_patch.__file__).read_text(), "_BUNDLED = {}  # this copy routes only the kinds below\n"]
    for kind, module in hooks("route"):
        if kinds is not None and kind not in kinds:
            continue
        text = Path(module.__file__).read_text()
        drop = set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ImportFrom) and (node.module == "__future__"
                                                     or (node.module or "").endswith("kernel_patch")):
                drop.update(range(node.lineno - 1, node.end_lineno))
        body = "\n".join("    " + line if line.strip() else "" for i, line in enumerate(text.splitlines())
                         if i not in drop)
        parts.append(f"# ---- the {kind} route (kernels/{kind}/route.py) ----\ndef _route_{kind}():\n{body}\n"
                     f"    return ROUTE\n\n\n_BUNDLED[{kind!r}] = _route_{kind}()\n")
    return "\n\n".join(parts)
