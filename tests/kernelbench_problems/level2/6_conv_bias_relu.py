"""A 2-d convolution, a bias add and a ReLU (our own problem, KernelBench level-2 style): no kernel type of
autokernel's computes a convolution, so the playbook agent tunes Inductor's seed of the whole problem (the
seed keeps the conv a library call, cuDNN on a GPU, and fuses the bias and the ReLU after it in Triton).

`AUTOKERNEL_MODEL_SIZE` (set by autokernel's loader) picks the size: `small` on the CPU, `large` on a GPU.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
BATCH, IN_C, OUT_C, HW = {"small": (2, 3, 8, 8), "large": (128, 64, 128, 64)}[SIZE]
KERNEL = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) + self.bias)


def get_inputs():
    return [torch.randn(BATCH, IN_C, HW, HW)]


def get_init_inputs():
    return [IN_C, OUT_C, KERNEL]
