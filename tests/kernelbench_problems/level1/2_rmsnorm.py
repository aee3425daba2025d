"""RMSNorm over the hidden dim of a batch of token vectors, with a learned scale (our own problem).

`AUTOKERNEL_MODEL_SIZE` (set by autokernel's loader) picks the size: `small` for the CPU run under
Triton's interpreter, `large` (the default with a GPU) for 16k tokens of width 4096.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
TOKENS, HIDDEN = {"small": (64, 256), "large": (16384, 4096)}[SIZE]


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=eps)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)  # not all ones: a kernel that drops the scale is caught

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, 1e-6]
