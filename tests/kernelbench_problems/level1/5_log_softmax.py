"""A log-softmax over the last dim (our own problem): none of autokernel's nine kernel types computes it,
so the playbook agent tunes Inductor's seed of the whole problem.

`AUTOKERNEL_MODEL_SIZE` (set by autokernel's loader) picks the size: `small` on the CPU, `large` on a GPU.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
ROWS, COLS = {"small": (8, 64), "large": (4096, 16384)}[SIZE]


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [-1]
