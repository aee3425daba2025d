"""Softmax over the last dim of a batch of rows (a problem of our own in KernelBench form).

`AUTOKERNEL_MODEL_SIZE` (set by autokernel's loader) picks the size: `small` keeps the CPU run under
Triton's interpreter short; `large` (the default with a GPU) moves 512 MiB per call.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
ROWS, COLS = {"small": (64, 256), "large": (8192, 8192)}[SIZE]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
