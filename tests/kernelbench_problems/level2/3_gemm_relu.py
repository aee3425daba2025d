"""A linear layer followed by ReLU (our own problem): the matmul is the kernel, ReLU stays in PyTorch.

`AUTOKERNEL_MODEL_SIZE` (set by autokernel's loader) picks the size: `small` for the CPU run under
Triton's interpreter, `large` (the default with a GPU) for a 4096 x 4096 x 4096 GEMM.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
BATCH, IN_FEATURES, OUT_FEATURES = {"small": (32, 64, 64), "large": (4096, 4096, 4096)}[SIZE]


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
