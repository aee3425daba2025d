"""The one check of a model path, shared by every command that takes one (profile, optimize, the TUI).

Each used to word it its own way (`optimize DIR` said "model file DIR does not exist" of a folder that exists,
`profile DIR` "not a file"); one function gives one line per case. It imports nothing heavy, so a config
is checked before torch loads.
"""

from __future__ import annotations

from pathlib import Path

from .errors import UserError


def check_model_file(path: str | Path) -> Path:
    """`path` as a Path if it is a file; otherwise UserError with one line saying what it is instead."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a model file: name the model's .py file "
                        f"(`autokernel kernelbench {path}` runs a folder of KernelBench problems)")
    if path.exists():
        raise UserError(f"{path} is not a regular file: name the model's .py file")
    raise UserError(f"model file {path} does not exist")
