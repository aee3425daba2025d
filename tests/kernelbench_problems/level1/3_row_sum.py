"""A sum over the last dim of a batch of rows (our own problem): the `reduce` kernel's contract, written
`torch.sum(x, dim=-1)` as KernelBench's reduction problems write it.

`AUTOKERNEL_MODEL_SIZE` (set by autokernel's loader) picks the size: `small` on the CPU, `large` on a GPU.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
ROWS, COLS = {"small": (64, 256), "large": (16384, 8192)}[SIZE]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
