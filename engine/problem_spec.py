"""A whole KernelBench problem as one target: the LLM agent writes all of `ModelNew`, not one kernel.

A problem with no operation of a known kernel type (a cumsum, a conv) can still be solved by a
complete replacement of its forward. This module makes such a problem look like a kernel type, so
the search, the worker, the five stages and the timer run it unchanged:

- Engine side, `problem_brief(path)`: what the prompt and the search need (the problem's source, what
  to write), and `defines_problem(source)`: whether a file is a problem at all. Neither imports it.
- Worker side, `problem_spec(path, device, size)`: a `KernelSpec` whose reference is the problem's
  `Model` (run with float64 copies of its weights when the harness upcasts the inputs to judge, the Model
  as written to time against), whose inputs are fresh `get_inputs()` draws, and whose candidate entry is
  the class `ModelNew`, built per check.

Memory: the float64 weights exist only for the length of one reference call, the reference carries the
problem's `Footprint` (engine/fit.py) for the harness to plan each trial by, a problem whose own tensors
exceed the device's free memory raises `DoesNotFit` (the verdict, with that footprint) before anything
is allocated for it, and a worker keeps only the problem it was last asked about.

Parameters: `Model` and `ModelNew` are each constructed right after `torch.manual_seed(SEED)`, as
KernelBench's own evaluation does; no state_dict is copied across. A ModelNew that creates the same
modules in the same order gets the same weights, and one that passes here passes KernelBench's eval.

Shapes: a problem has one shape, the one get_inputs() gives. The spec's "shapes" are draws
(`{"draw": n}`), so the stages mean: smoke (one draw), shape_sweep (more draws, and the same tensors
refilled), stability (floating inputs scaled by 1e3 and 1e-3), determinism, and an edge stage that is
skipped with its reason (no edge shapes, no non-contiguous views: KernelBench's inputs are contiguous).

Outputs: a tensor, or several (a tuple or list of tensors, `return y, y.sum(-1)`); then ModelNew returns
as many in the same order, and every check compares them one by one (`engine/outputs.py`).
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable

from .outputs import as_list, several

PROBLEM_TARGET = "problem"  # the target's name, and the prefix of its candidates' ids
ENTRY = "ModelNew"
MODEL_SEED = "Model"  # the first round's parent: the problem's own Model (no candidate yet, nothing stored)
SIGNATURE = "class ModelNew(torch.nn.Module): ModelNew(*get_init_inputs()), forward(*get_inputs())"
# Ops a library does best (cuDNN convolutions, cuBLAS GEMMs). A whole-problem candidate may call them for its
# part of a problem that has other work too (a conv's bias and activations, a GEMM's epilogue), as torch.compile
# does on a GPU; a problem that is nothing but these gets no such leave: its candidate writes the kernel.
LIBRARY_OPS = frozenset({"convolution", "_convolution", "mm", "addmm", "bmm", "baddbmm"})
ATOL = RTOL = 1e-2  # the harness stages' screening tolerance for a whole ModelNew (against a float64 reference)
# KernelBench's verdict on a ModelNew (its current release, `get_tolerance_for_precision`): outputs against
# Model's, elementwise, atol = rtol by the output's dtype (float32 1e-4, half types 1e-2).
KERNELBENCH_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-4}


def kernelbench_tolerance(dtype: Any) -> float:
    """atol = rtol for an output of `dtype` (a torch dtype), as KernelBench judges it."""
    return KERNELBENCH_TOLERANCE.get(str(dtype).removeprefix("torch."), 1e-4)
SEED = 42  # KernelBench's seed: Model and ModelNew are each built right after torch.manual_seed(SEED)
SCALES = {"large": 1e3, "tiny": 1e-3}  # milder than a kernel's: a whole model multiplies its inputs through
NOTES = (
    "Write one complete Python file that defines `class ModelNew(torch.nn.Module)` replacing the problem's "
    "Model: the same constructor arguments (get_init_inputs()) and the same forward inputs (get_inputs()), "
    "returning what Model.forward returns (same shape and dtype, within atol = rtol = 1e-2 of the exact answer, "
    "and, as KernelBench judges, within atol = rtol = 1e-4 for float32 (1e-2 for half types) of Model's own output "
    "on this device, whose float32 convolutions run in TF32 on a GPU; when it returns "
    "several tensors, a tuple of as many, in the same order, each checked so). Model and ModelNew "
    "are each built right after torch.manual_seed(42) (KernelBench's rule): create the same parameters and "
    "submodules in the same order so the weights agree. `__init__` may create parameters with torch ops; "
    "`forward` must launch your own kernel(s) and may only allocate, view and copy with torch (no torch math, "
    "no calls to the problem's PyTorch ops, no torch.compile, no .item()), and must not change its inputs. "
    "Do not import the problem file: the harness gives ModelNew the problem's inputs. KernelBench's static "
    "check rejects a file with try/except, a `pass` statement, threads or a tensor subclass: write none."
)

LIBRARY_NOTE = (
    " This problem does more than its convolutions and matrix products: `forward` may call those through torch "
    "(F.conv2d, torch.mm, ...: cuDNN and cuBLAS), and its own kernels must compute all the rest (bias, "
    "activations, norms, reductions), fused where they can be."
)


@dataclass(frozen=True)
class ProblemBrief:
    """The engine's view of a whole-problem target (read by the prompt and the search, like a spec)."""

    path: str
    source: str
    name: str = PROBLEM_TARGET
    signature: str = SIGNATURE
    summary: str = "the problem's whole forward: Model(*get_init_inputs())(*get_inputs())"
    notes: str = NOTES
    entry: str = ENTRY
    starters: dict = field(default_factory=dict)  # none: the first round starts from the problem's Model
    # Other seeds of the same problem the agent may start from instead, {name: path} (the seed generator's
    # variants: engine/inductor_seed.py `seed_variants`).
    seed_variants: dict = field(default_factory=dict)
    forbidden_ops: frozenset = frozenset()
    reference: Callable[..., Any] | None = None
    # What the search asks of a target's spec (kernels/spec.py KernelSpec asks the same).
    starter_required = False  # an agent that writes ModelNew starts from the problem's Model instead

    def first_parent(self) -> tuple[str, str, str]:
        """The problem's Model (never stored) is the parent of the first ideas when there is no candidate."""
        return MODEL_SEED, "the problem's Model", self.source

    def starter_params(self, source: str) -> dict:
        """An Inductor seed's launch constants are its params (a ModelNew that is not a seed has none)."""
        from .agents.seed_moves import seed_knobs

        return seed_knobs(source)

    def worker_args(self, size: str | None) -> dict:
        """The worker builds the problem's spec from its file, at the session's size."""
        return {"problem": self.path, "size": size}

    def agent_problem(self) -> str:
        return self.path


def problem_brief(path: str | Path) -> ProblemBrief:
    path = Path(path).resolve()
    return ProblemBrief(path=str(path), source=path.read_text(errors="replace"))


def defines_problem(source: str) -> bool:
    """Whether a file's top level defines `Model` and `get_inputs` (read, never imported)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a broken problem file is still a problem: it is reported as skipped
        return bool(re.search(r"^class\s+Model\b", source, re.M)) and "get_inputs" in source
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    names |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    return {"Model", "get_inputs"} <= names


def build_seeded(cls: Any, init: list, device: str) -> Any:
    """`cls(*init)` on `device`, right after the fixed seed (Model and ModelNew alike), left in the mode it
    was built in: KernelBench never calls `.eval()`, so a BatchNorm there normalises with the batch's own
    statistics, and so must the Model every candidate is judged against."""
    import torch

    torch.manual_seed(SEED)
    with torch.device(device):
        model = cls(*init)
    return model.to(device)


def _no_grad(model: Any) -> Callable[..., Any]:
    import torch

    def forward(*args: Any) -> Any:
        with torch.no_grad():
            return model(*args)

    return forward


class AutogradOnlyFailure(RuntimeError):
    """ModelNew fails with autograd on and runs without it."""


def call_autograd_first(model: Any, args: Any) -> Any:
    """`model(*args)` with autograd on, as a user's script and KernelBench's timing call a ModelNew (code that
    writes into `out=` buffers fails there when a parameter requires grad), its outputs detached. A failure of its
    own, autograd or not, is raised as it is; one only with autograd on is an AutogradOnlyFailure; running out of
    memory only with the tensors autograd keeps is not the candidate's: judged without them."""
    import torch

    failed = None
    try:
        with torch.enable_grad():
            return detached(model(*args))
    except torch.OutOfMemoryError:
        pass
    except Exception as e:
        failed = f"{type(e).__name__}: {e}"
    if torch.cuda.is_available():  # past the except block: the failed call's frames and tensors are gone
        torch.cuda.empty_cache()
    with torch.no_grad():
        out = model(*args)
    if failed:
        raise AutogradOnlyFailure(f"ModelNew fails with autograd on (as a user's code and KernelBench's timing "
                                  f"call it), not without: {failed}")
    return out


def _autograd_first(model: Any) -> Callable[..., Any]:
    """A candidate ModelNew called the first time by `call_autograd_first`, then without autograd."""
    import torch

    calls = []

    def forward(*args: Any) -> Any:
        if calls:
            with torch.no_grad():
                return model(*args)
        calls.append(1)
        return call_autograd_first(model, args)

    return forward


def detached(out: Any) -> Any:
    """Outputs (a tensor, or a tuple or list of them) cut from autograd's graph."""
    import torch

    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, (tuple, list)):
        return type(out)(detached(o) for o in out)
    return out


_SPECS: dict[tuple, Any] = {}  # per worker: the reference Model (and its compiled form) of the last problem


def problem_spec(path: str | Path, device: str, size: str | None = None) -> Any:
    """The KernelSpec of a problem file (worker side: imports the problem and builds its Model). Built once
    per worker and problem; asking for another problem lets the previous one's Model go first."""
    from .fit import release
    from .model_loading import SIZE_ENV, default_size

    path = Path(path).resolve()
    size = size or default_size(device)
    key = (str(path), path.stat().st_mtime_ns, device, size)
    if key not in _SPECS:
        if _SPECS:
            _SPECS.clear()
            release(device)
        os.environ[SIZE_ENV] = size  # the size the session profiled
        _SPECS[key] = _build_spec(path, device)
    return _SPECS[key]


def _is_oom(e: BaseException) -> bool:
    import torch

    from .fit import DoesNotFit

    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) and not isinstance(e, DoesNotFit)


def library_leave(model_ops: Iterable[str]) -> frozenset[str]:
    """The library ops a candidate for a problem that issues `model_ops` may call: LIBRARY_OPS where the
    problem computes something else too, none where a library call would be the whole problem."""
    from .harness import ALLOWED_OPS

    computes = {op for op in model_ops if op not in ALLOWED_OPS}
    return LIBRARY_OPS if computes - LIBRARY_OPS else frozenset()


def _meta_inputs(module: Any) -> list | None:
    """A get_inputs() draw on the meta device (sizes and dtypes, no memory), or None where it does not run
    there (it reads values: a numpy round trip, `.item()`)."""
    import torch

    try:
        with torch.device("meta"):
            return list(module.get_inputs())
    except Exception:
        return None


def _meta_sizes(module: Any, init: list, sample: list) -> tuple[int, int] | None:
    """(parameter bytes, output bytes) of the Model on the meta device (nothing allocated), or None when its
    construction or forward does not run there."""
    import torch

    from .fit import tensor_bytes

    try:
        with torch.device("meta"), torch.no_grad():
            model = module.Model(*init)
            args = [torch.empty_like(a, device="meta") if isinstance(a, torch.Tensor) else a for a in sample]
            out = model(*args)
        return tensor_bytes(list(model.parameters()) + list(model.buffers())), tensor_bytes(as_list(out))
    except Exception:
        return None


def _floating_elements(tensors: Any) -> int:
    import torch

    return sum(t.numel() for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point())


def _wide_forward(model: Any) -> Callable[..., Any]:
    """The Model with float64 copies of its floating weights, made for this one call only (a deepcopy kept
    for the worker's life would hold twice the weights on the device the whole time)."""
    import torch

    def forward(*args: Any) -> Any:
        state = {k: v.double() if v.is_floating_point() else v
                 for k, v in [*model.named_parameters(), *model.named_buffers()]}
        with torch.no_grad():
            return torch.func.functional_call(model, state, tuple(args))

    return forward


def _build_spec(path: Path, device: str) -> Any:
    import torch

    from autokernel.kernels.spec import KernelSpec

    from .fit import DoesNotFit, Footprint, free_bytes, release, tensor_bytes
    from .harness import ALLOWED_OPS, _OpRecorder
    from .model_loading import _import_file, _move, draw_inputs

    module = _import_file(path)
    init = list(getattr(module, "get_init_inputs", lambda: [])())

    def draw(seed: int) -> list:
        torch.manual_seed(seed)
        return _move(list(draw_inputs(module.get_inputs, device)), device, None)

    torch.manual_seed(SEED)
    planned = _meta_inputs(module)  # their sizes, before anything is allocated for the problem
    host = list(module.get_inputs()) if planned is None else None  # as the problem makes them
    sized = planned if host is None else host
    in_bytes = tensor_bytes(sized)
    meta = _meta_sizes(module, init, sized)
    if meta is not None:  # the verdict before anything is allocated for the problem
        need = Footprint(in_bytes, meta[1], meta[0])
        if need.total > free_bytes(device):
            release(device)
            if need.total > free_bytes(device):
                raise DoesNotFit(need.total, device, "its inputs, the Model's and ModelNew's outputs"
                                 + (", its weights" if need.params else ""))
    try:
        model = build_seeded(module.Model, init, device)
        if host is None:
            torch.manual_seed(SEED)
            host = draw_inputs(module.get_inputs, device)
        sample = _move(list(host), device, None)
        del host
        with torch.no_grad(), _OpRecorder() as rec:
            out = model(*sample)
    except Exception as e:
        if not _is_oom(e):
            raise
        params, outs = meta or (0, 0)
        raise DoesNotFit(Footprint(in_bytes, outs, params).total, device,
                         "the Model's own forward ran out of memory") from None
    floating = tuple(i for i, a in enumerate(sample) if isinstance(a, torch.Tensor) and a.is_floating_point())
    dtype = sample[floating[0]].dtype if floating else torch.float32
    outs = as_list(out)
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        what = ", ".join(type(o).__name__ for o in outs) if several(out) else type(out).__name__
        raise ValueError(f"{path.name}: Model.forward returns {what}; a whole-problem target needs a tensor "
                         "or a tuple of tensors")
    weights = [*model.parameters(), *model.buffers()]
    footprint = Footprint(inputs=tensor_bytes(sample), outputs=tensor_bytes(outs), params=tensor_bytes(weights),
                          wide=8 * (_floating_elements(sample) + _floating_elements(outs) + _floating_elements(weights)))
    nbytes = footprint.inputs + footprint.outputs
    del sample, out, outs, weights
    wide = _wide_forward(model)

    def make_inputs(shape: dict, _dtype: Any, dev: Any, gen: torch.Generator, mode: str = "normal") -> tuple:
        """A fresh get_inputs() draw (the problem's own dtypes); floating inputs scaled in `mode`."""
        if mode != "normal" and mode not in SCALES:
            raise ValueError(f"a whole problem has no {mode!r} inputs")
        args = draw(int(torch.randint(0, 2**62, (1,), generator=gen)))
        return tuple(a.to(dev) * SCALES[mode] if i in floating and mode != "normal"
                     else (a.to(dev) if isinstance(a, torch.Tensor) else a) for i, a in enumerate(args))

    def reference(*args: Any) -> Any:
        """Model on the inputs' device; with float64 weights when the harness upcast the inputs to judge."""
        upcast = dtype != torch.float64 and any(isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in args)
        moved = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
        return wide(*moved) if upcast else _no_grad(model)(*moved)

    reference.footprint = footprint  # read by the harness to plan each trial's memory (engine/harness.py)

    def bind(cls: Any) -> Callable[..., Any]:
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            raise TypeError("ModelNew must be a torch.nn.Module subclass")
        return _autograd_first(build_seeded(cls, init, device))

    tolerances = {d: (ATOL, RTOL) for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64)}
    leave = library_leave(rec.ops)
    return KernelSpec(
        name=PROBLEM_TARGET, signature=SIGNATURE, summary=f"the whole forward of {path.name}",
        reference=reference, make_inputs=make_inputs, bytes_moved=lambda shape, dt: nbytes,
        flops=lambda shape, dt: 0, metric="GB/s", smoke_shape={"draw": 1},
        sweep_shapes=({"draw": 2}, {"draw": 3}), edge_shapes=(), bench_shapes=({"draw": 1},),
        tolerances=tolerances, dtypes=(dtype,), data_args=floating,
        forbidden_ops=frozenset(op for op in rec.ops if op not in ALLOWED_OPS),
        library_ops=leave, notes=NOTES + (LIBRARY_NOTE if leave else ""),
        baseline=_no_grad(model), entry=ENTRY, bind=bind, stability_modes=tuple(SCALES),
        noncontiguous_views=False, native_tolerance=kernelbench_tolerance)
