"""Load a user's model file (KernelBench form) safely: every way it can fail is one specific line.

A model file defines `Model(nn.Module)`, `get_inputs()` and usually `get_init_inputs()` (taken as
`[]` when absent). As a friendly extra, a file may instead define `get_model_and_inputs()`
returning `(model, inputs)`. KernelBench files build their inputs on the CPU and leave the device
to the evaluator, so the loader moves the model and its inputs to the run's device itself; a file
that puts inputs on a device other than the CPU and the run's device is an error.

Before importing, the loader sets `AUTOKERNEL_MODEL_SIZE` (`small` | `large`) so that a model file
(the bundled examples do) can size itself for the device. The model is put in eval mode and one
forward is run under `torch.no_grad()` to prove it works before anything is profiled.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from .errors import UserError
from .model_file import check_model_file

SIZES = ("small", "large")
SIZE_ENV = "AUTOKERNEL_MODEL_SIZE"
_counter = itertools.count()


@dataclass
class LoadedModel:
    """A model ready to run: on its device, in eval mode, with inputs that one forward accepted."""

    path: Path
    name: str  # the file's stem, e.g. "llama"
    model: nn.Module
    inputs: list
    device: str  # "cpu" | "cuda"
    module: ModuleType  # the imported file
    size: str = "small"
    dtype: torch.dtype | None = None  # what the model was cast to, None if left as the file made it

    def forward(self) -> Any:
        """One forward on the stored inputs (no grad)."""
        with torch.no_grad():
            return self.model(*self.inputs)


def default_size(device: str) -> str:
    return "large" if device == "cuda" else "small"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0].strip() if text else ""
    if len(line) > 300:
        line = line[:297] + "..."
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def _where(e: BaseException, path: Path) -> str:
    """` (model.py:12)`: the innermost frame of the traceback that lies in the user's file."""
    target = str(path.resolve())
    line = None
    for frame in traceback.extract_tb(e.__traceback__):
        try:
            if str(Path(frame.filename).resolve()) == target:
                line = frame.lineno
        except OSError:
            continue
    return f" ({path.name}:{line})" if line else ""


def _import_file(path: Path) -> ModuleType:
    """Import under a unique name, so two models (or the same file twice) never collide."""
    mod_name = f"_autokernel_model_{path.stem.replace('-', '_')}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    folder = str(path.parent.resolve())
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)  # a model may import helpers that sit beside it
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(mod_name, None)
        raise UserError(f"{path.name}: line {e.lineno}: SyntaxError: {e.msg}") from e
    except KeyboardInterrupt:
        sys.modules.pop(mod_name, None)
        raise
    except SystemExit as e:
        sys.modules.pop(mod_name, None)
        raise UserError(f"{path.name} called exit({e.code}) while being imported") from e
    except BaseException as e:
        sys.modules.pop(mod_name, None)
        tb = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == path.resolve()]
        where = f": line {tb[-1].lineno}" if tb else ""
        raise UserError(f"{path.name}{where}: {_first_line(e)}") from e
    finally:
        if added:
            try:
                sys.path.remove(folder)
            except ValueError:
                pass
    return module


def _call(what: str, fn, path: Path, device: str, *args):
    """Call user code; turn any exception into one line naming what raised and the model's message."""
    try:
        return fn(*args)
    except KeyboardInterrupt:
        raise
    except torch.cuda.OutOfMemoryError as e:
        raise UserError(f"{what} ran out of GPU memory{_where(e, path)}: try --size small or --dtype bf16") from e
    except BaseException as e:
        msg = str(e)
        if not torch.cuda.is_available() and ("CUDA" in msg or "cuda" in msg):
            raise UserError(
                f"{what} puts tensors on cuda, but torch sees no CUDA GPU here{_where(e, path)} "
                f"({_first_line(e)}): build them on the CPU, autokernel moves them to the run's device"
            ) from e
        raise UserError(f"{what} raised {_first_line(e)}{_where(e, path)}") from e


def _tensors(obj: Any):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def _move(obj: Any, device: str, dtype: torch.dtype | None) -> Any:
    """Inputs to the run's device; floating tensors to `dtype` when one is asked for."""
    if isinstance(obj, torch.Tensor):
        if dtype is not None and obj.is_floating_point():
            return obj.to(device=device, dtype=dtype)
        return obj.to(device)
    if isinstance(obj, list):
        return [_move(x, device, dtype) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_move(x, device, dtype) for x in obj)
    if isinstance(obj, dict):
        return {k: _move(v, device, dtype) for k, v in obj.items()}
    return obj


def draw_inputs(get_inputs: Callable[[], Any], device: str) -> Any:
    """`get_inputs()` with `device` as torch's default device, so its `torch.rand(...)` fills device memory
    directly: a problem's gigabytes of inputs are drawn in milliseconds on a GPU instead of tens of seconds on
    the CPU, and never cross PCIe. A get_inputs() that cannot run there (a numpy round trip, a CPU-only op) is
    called again as written; the caller moves its tensors as before."""
    if torch.device(device).type == "cpu":
        return get_inputs()
    try:
        with torch.device(device):
            return get_inputs()
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception:
        return get_inputs()


def _check_input_devices(inputs: Any, device: str, source: str) -> None:
    for t in _tensors(inputs):
        if t.device.type not in ("cpu", device):
            where = str(t.device)
            raise UserError(f"{source} returned a tensor on {where} but the run is on {device}")


def _as_list(value: Any, what: str) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, torch.Tensor):
        return [value]
    raise UserError(f"{what} must return a list of inputs, not {type(value).__name__}")


def load_model(path: str | Path, device: str, size: str | None = None, dtype: torch.dtype | str | None = None) -> LoadedModel:
    """Import `path`, build the model and its inputs on `device`, and prove one forward runs."""
    path = check_model_file(path)
    if device not in ("cpu", "cuda"):
        raise UserError(f"unknown device {device!r}: use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("the run is on cuda, but torch sees no CUDA GPU")
    size = size or default_size(device)
    if size not in SIZES:
        raise UserError(f"unknown size {size!r}: use small or large")
    if isinstance(dtype, str):
        from ..kernels.spec import DTYPES

        if dtype not in DTYPES:
            raise UserError(f"unknown dtype {dtype!r}: use {', '.join(DTYPES)}")
        dtype = DTYPES[dtype]

    os.environ[SIZE_ENV] = size
    module = _import_file(path)

    if hasattr(module, "get_model_and_inputs"):
        made = _call("get_model_and_inputs()", module.get_model_and_inputs, path, device)
        if not (isinstance(made, (tuple, list)) and len(made) == 2):
            raise UserError("get_model_and_inputs() must return (model, inputs)")
        model, inputs = made
        if not isinstance(model, nn.Module):
            raise UserError(f"get_model_and_inputs() returned {type(model).__name__} as the model, not an nn.Module")
        source = "get_model_and_inputs()"
        inputs = _as_list(inputs, source)
    else:
        missing = [n for n in ("Model", "get_inputs") if not hasattr(module, n)]
        if missing:
            what = " or ".join(f"{n}()" if n != "Model" else "Model" for n in missing)
            raise UserError(f"{path.name} does not define {what} (a model file defines Model, get_inputs() and get_init_inputs())")
        if not (isinstance(module.Model, type) and issubclass(module.Model, nn.Module)):
            raise UserError(f"{path.name}: Model must be a subclass of torch.nn.Module")
        init_fn = getattr(module, "get_init_inputs", lambda: [])
        init_inputs = _as_list(_call("get_init_inputs()", init_fn, path, device), "get_init_inputs()")
        # Built straight on the run's device: a billion-parameter example initialises in
        # seconds on a GPU instead of a minute on the CPU. The model is moved there anyway.
        def build():
            with torch.device(device):
                return module.Model(*init_inputs)

        model = _call("Model(...)", build, path, device)
        source = "get_inputs()"
        inputs = _as_list(_call(source, lambda: draw_inputs(module.get_inputs, device), path, device), source)

    _check_input_devices(inputs, device, source)
    try:
        model = model.to(device)
        if dtype is not None:
            model = model.to(dtype)
    except torch.cuda.OutOfMemoryError as e:
        raise UserError("the model does not fit in GPU memory: try --size small or --dtype bf16") from e
    model.eval()
    inputs = _move(inputs, device, dtype)

    with torch.no_grad():
        _call("forward", lambda: model(*inputs), path, device)
    if device == "cuda":
        torch.cuda.synchronize()
    return LoadedModel(path=path.resolve(), name=path.stem, model=model, inputs=inputs, device=device,
                       module=module, size=size, dtype=dtype)
