"""What a kernel type is, described once: the contract every candidate kernel is judged against.

A spec names the function a candidate must define (`kernel_fn` with `signature`), the PyTorch
reference it must match, how to make inputs for any shape, dtype and numerical regime, the shapes
it is tested and timed on, the bytes and FLOPs a shape costs (for the speed-of-light floor) and
the tolerance per dtype. The harness, the benchmark, the profiler's floors and the agents all read
the same object, so a kernel type is added in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

Shape = Mapping[str, int]

# Regimes the stability stage feeds a kernel. "normal" is what every other stage uses.
INPUT_MODES = ("normal", "large", "tiny", "mixed", "constant")

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


def dtype_from_name(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}") from None


def element_size(dtype: torch.dtype) -> int:
    """Bytes of one element of `dtype`: what a spec's `bytes_moved` counts in."""
    return torch.empty((), dtype=dtype).element_size()


def _on_device(gen: torch.Generator, device: Any) -> torch.Generator:
    """A generator on `device` seeded from the host generator `gen` (the same `gen` state, the same
    inputs), or `gen` itself for a host tensor. Drawing on the host and copying over cost seconds per
    input at LLM sizes (a [262144, 2048] softmax input is 537M values), once per trial of every check."""
    dev = torch.device(device)
    if dev.type == "cpu" or gen.device.type != "cpu":
        return gen
    seed = int(torch.randint(0, 2**62, (), generator=gen))
    return torch.Generator(device=dev).manual_seed(seed)


def random_tensor(
    shape: Sequence[int], dtype: torch.dtype, device: Any, gen: torch.Generator, mode: str = "normal"
) -> torch.Tensor:
    """A tensor in one of the numerical regimes (`INPUT_MODES`), drawn from `gen` (never zeros).

    large: values near 1e4 (overflows exp() without a max subtraction); tiny: near 1e-6;
    mixed: each row scaled by 10^U(-3, 3); constant: one repeated non-zero value.
    """
    gen = _on_device(gen, device)
    where = gen.device
    t = torch.randn(*shape, generator=gen, dtype=torch.float32, device=where)
    if mode == "large":
        t = t * 1e4 if dtype == torch.float32 else t * 3e3  # fp16 tops out at 65504
    elif mode == "tiny":
        t = t * 1e-6
    elif mode == "mixed":
        lead = shape[:-1] if len(shape) > 1 else (1,)
        scale = torch.pow(10.0, torch.empty(*lead, 1, dtype=torch.float32, device=where).uniform_(-3, 3, generator=gen))
        t = t * scale.reshape(*shape[:-1], 1) if len(shape) > 1 else t * scale.reshape(1)
    elif mode == "constant":
        value = float(torch.rand((), generator=gen, device=where) * 2 + 0.5)
        t = torch.full(tuple(shape), value, dtype=torch.float32, device=where)
    elif mode != "normal":
        raise ValueError(f"unknown input mode {mode!r}")
    return t.to(dtype=dtype, device=device)


def noncontiguous_like(t: torch.Tensor) -> torch.Tensor:
    """The same values as `t`, as a non-contiguous view (every other column of a wider buffer)."""
    if t.dim() == 0:
        return t
    wide = torch.empty(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype, device=t.device)
    wide.normal_()
    view = wide[..., ::2]
    view.copy_(t)
    return view


def starters_beside(init_file: str) -> dict[str, Path]:
    """The starter candidates in a kernel's folder: `starter_<backend>.py` -> {backend: path}.

    Discovery instead of a hand-kept dict, so the Triton and CUDA starters of a type can be added
    by different people without touching the spec.
    """
    folder = Path(init_file).resolve().parent
    return {p.stem.removeprefix("starter_"): p for p in sorted(folder.glob("starter_*.py"))}


@dataclass(frozen=True)
class KernelSpec:
    """One kernel type (see module docstring). Callables take plain Python/torch values."""

    name: str
    signature: str  # e.g. "kernel_fn(x, weight, eps=1e-6)"
    summary: str  # one line: what it computes
    reference: Callable[..., torch.Tensor]  # PyTorch reference, same signature as kernel_fn
    make_inputs: Callable[[Shape, torch.dtype, Any, torch.Generator, str], tuple]  # (shape, dtype, device, gen, mode) -> args
    bytes_moved: Callable[[Shape, torch.dtype], int]  # fewest bytes through device memory
    flops: Callable[[Shape, torch.dtype], int]
    metric: str  # "GB/s" (memory-bound) or "TFLOP/s" (compute-bound)
    smoke_shape: Shape
    sweep_shapes: tuple[Shape, ...]  # tiny to LLM scale, non-powers of two included
    edge_shapes: tuple[Shape, ...]  # sizes of 1, odd, non-power-of-two
    bench_shapes: tuple[Shape, ...]  # what `autokernel bench` times on a GPU
    tolerances: Mapping[torch.dtype, tuple[float, float]]  # dtype -> (atol, rtol), compared in float64
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
    # How a call in a user's model maps to this spec's shape (profiling, integration).
    shape_from_args: Callable[..., Shape] | None = None
    # Positions of args that are data tensors (get the regime of `mode`, may be made non-contiguous).
    data_args: tuple[int, ...] = (0,)
    # Aten ops that compute this kernel's result; a candidate that calls one is calling the reference.
    forbidden_ops: frozenset[str] = frozenset()
    # Aten ops a candidate may leave to a library kernel (cuDNN's conv, cuBLAS's GEMM), as KernelBench allows
    # for part of a whole problem: set only where the problem has other work, which its own kernels must do.
    library_ops: frozenset[str] = frozenset()
    starters: Mapping[str, Path] = field(default_factory=dict)  # backend -> candidate file
    notes: str = ""  # kernel-specific facts shown to agents (layout, what to fuse)
    # What a PyTorch user writes for this op, in the inputs' dtype: the "eager" and "torch.compile"
    # that speedups are measured against. `reference` computes in fp32/fp64 to be the judge of
    # correctness, which is slower than idiomatic eager (an fp32 matmul for bf16 inputs) and would
    # inflate every speedup. None: the reference is already how users write it.
    baseline: Callable[..., torch.Tensor] | None = None
    # What a candidate file defines, and how the harness turns it into the callable it checks and times:
    # `kernel_fn` itself for a kernel type; a whole-problem spec (engine/problem_spec.py) reads the
    # class `ModelNew` and builds it as the reference Model was built.
    entry: str = "kernel_fn"
    bind: Callable[[Any], Callable[..., Any]] | None = None
    # Regimes of the stability stage, and whether the edge stage also feeds non-contiguous views
    # (a whole problem gets only its own get_inputs(), which are contiguous).
    stability_modes: tuple[str, ...] = tuple(m for m in INPUT_MODES if m != "normal")
    noncontiguous_views: bool = True
    # atol = rtol against the reference run as the user runs it (the inputs' own dtype, this device's library
    # kernels: a cuDNN conv in TF32), by output dtype; None: only the float64 judge. A whole problem sets
    # KernelBench's rule here, so a candidate that passes the stages also passes KernelBench's own check.
    native_tolerance: Callable[[torch.dtype], float] | None = None
    # Dims that mostly repeat the same work (the rows of a row-wise kernel): a kernel usually picks its code
    # path by the others, so the CPU interpreter checks a shape too large for it with these cut to a few
    # (`engine/coverage.py`), and says that it did (a path chosen by the row count may still go unseen).
    batch_dims: tuple[str, ...] = ()
    # Where the type is listed among the kernel types (lower first, ties by name): `autokernel kernels`,
    # the profiler's kinds and the CUDA self-check keep one order however the folders were found.
    order: int = 1000

    @property
    def eager(self) -> Callable[..., torch.Tensor]:
        return self.baseline or self.reference

    @property
    def backends(self) -> list[str]:
        return sorted(self.starters)

    def elements(self, shape: Shape) -> int:
        """Rough problem size, used to keep the CPU interpreter on small shapes."""
        n = 1
        for v in shape.values():
            if isinstance(v, bool):
                continue
            n *= max(int(v), 1)
        return n

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        return self.tolerances[dtype]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "backends": self.backends, "signature": self.signature, "metric": self.metric}

    # -- what the search asks of a target's spec; a whole problem's brief (engine/problem_spec.py) answers
    # the same questions its own way, so the search has no case of its own for it.
    starter_required = True  # a kernel type is searched from its starter

    def first_parent(self) -> tuple[str, str, str] | None:
        """(id, label, source) of the parent of the first ideas when there is no candidate yet: none here."""
        return None

    def starter_params(self, source: str) -> dict:
        """The knobs a starter's source already sets, so the agent's first moves are one-knob moves."""
        return {}

    def worker_args(self, size: str | None) -> dict:
        """What a worker needs beside the kernel's name to build this spec: nothing for a kernel type."""
        return {}

    def agent_problem(self) -> str:
        """The problem file the agent is shown: none for a kernel type."""
        return ""
