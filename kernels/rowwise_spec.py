"""The mechanics the row-wise kernel types' specs share: an op over the last dim of a [rows, cols] view.

softmax, layernorm, rmsnorm, reduce and cross_entropy each read the last dim of their first argument row
by row, are memory-bound and are checked and timed the same way; what makes each its own (reference,
inputs beyond the data, bytes and FLOPs, shapes, tolerances, notes) stays in its folder. Here is only what
their specs would otherwise each spell out again.
"""

from __future__ import annotations

from typing import Any

import torch

from .spec import KernelSpec, random_tensor, starters_beside

ROW_SMOKE_SHAPE = {"rows": 8, "cols": 1024}

# A norm over a model's hidden size: narrow and wide rows, odd widths, and the hidden sizes of LLMs.
NORM_SWEEP_SHAPES = (
    {"rows": 4, "cols": 64},
    {"rows": 37, "cols": 1000},
    {"rows": 128, "cols": 768},
    {"rows": 16, "cols": 5120},
    {"rows": 4, "cols": 20000},
    {"rows": 4096, "cols": 4096},
    {"rows": 8192, "cols": 8192},
    {"rows": 2048, "cols": 12288},
)
NORM_EDGE_SHAPES = (
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 17},
    {"rows": 3, "cols": 5},
    {"rows": 257, "cols": 3},
    {"rows": 2, "cols": 16385},
)
# Few, wide rows (an op over several trailing dims): what the starters' split-row path is for
# (tests/test_split_rows.py).
FEW_WIDE_ROWS = (
    {"rows": 16, "cols": 4194304},
    {"rows": 64, "cols": 1048576},
)


def rows_of_last_dim(x: torch.Tensor, *rest, **kwargs) -> dict[str, int]:
    """The {rows, cols} shape of a call whose first argument is read along its last dim."""
    cols = int(x.shape[-1])
    return {"rows": int(x.numel() // max(cols, 1)), "cols": cols}


def row_data(shape, dtype: torch.dtype, device: Any, gen: torch.Generator, mode: str) -> torch.Tensor:
    """The [rows, cols] data argument of a row-wise op in the regime `mode`."""
    return random_tensor((int(shape["rows"]), int(shape["cols"])), dtype, device, gen, mode)


def trained_gain(cols: int, dtype: torch.dtype, device: Any, gen: torch.Generator, centre: float) -> torch.Tensor:
    """A norm's per-column parameter as a trained model has it: near `centre` (1 for a weight, 0 for a bias)
    but not equal to it, so a kernel that ignores or swaps it fails."""
    return (centre + 0.1 * torch.randn(cols, generator=gen)).to(dtype=dtype, device=device)


def rowwise_spec(init_file: str, **fields) -> KernelSpec:
    """The KernelSpec of the row-wise type whose `__init__.py` is `init_file`: measured in GB/s, rows the dim
    that repeats the same work, the first argument the data, the {rows, cols} shape of a call read from it,
    the starters beside the file; `fields` give the rest and may override any of these."""
    shared = {"metric": "GB/s", "smoke_shape": dict(ROW_SMOKE_SHAPE), "batch_dims": ("rows",), "data_args": (0,),
              "shape_from_args": rows_of_last_dim, "starters": starters_beside(init_file)}
    return KernelSpec(**{**shared, **fields})
