"""Example models shipped with the tool, in KernelBench form (`Model`, `get_inputs`, `get_init_inputs`).

Each reads `AUTOKERNEL_MODEL_SIZE` (`small`: profiles in seconds on a CPU; `large`: fills an H100),
which the loader sets from `--size` (default: large on cuda, small on cpu).
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def names() -> list[str]:
    """The bundled example models, by name (file stem)."""
    return sorted(p.stem for p in _HERE.glob("*.py") if not p.stem.startswith("_"))


def example_path(name: str = "llama") -> Path:
    """The file of a bundled example; ValueError naming the known ones otherwise."""
    path = _HERE / f"{name}.py"
    if name.startswith("_") or not path.is_file():
        raise ValueError(f"unknown example {name!r}; known: {', '.join(names())}")
    return path
