"""A running sum along the last dim and each row's total (a problem of our own in KernelBench form).

`forward` returns two tensors of different shapes, `(running sum [rows, cols], total [rows])`, so a
whole-problem ModelNew must return both, in this order. No kernel type of autokernel computes either
(cumsum; the total is a view of it), so the LLM agent takes the problem whole. Kept out of
tests/kernelbench_problems, whose batch tests count that folder's problems.

`AUTOKERNEL_MODEL_SIZE` (set by autokernel's loader) picks the size: `small` on the CPU, `large` on a GPU.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
ROWS, COLS = {"small": (64, 256), "large": (8192, 8192)}[SIZE]


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.cumsum(x, dim=self.dim)
        return y, y.select(self.dim, -1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [-1]
