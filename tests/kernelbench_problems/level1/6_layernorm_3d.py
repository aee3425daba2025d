"""LayerNorm over the three trailing dims of a batch of feature maps (our own problem, as KernelBench's
LayerNorm problem has it): normalized over features x height x width together, with a learned scale and shift.

`AUTOKERNEL_MODEL_SIZE` (set by autokernel's loader) picks the size: `small` on the CPU, `large` on a GPU.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
BATCH, FEATURES, HEIGHT, WIDTH = {"small": (8, 4, 8, 16), "large": (16, 64, 256, 256)}[SIZE]


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)
        with torch.no_grad():  # not ones and zeros: a kernel that drops the scale or the shift is caught
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, HEIGHT, WIDTH)]


def get_init_inputs():
    return [(FEATURES, HEIGHT, WIDTH)]
