"""L2 normalization over dim 1 of an NCHW tensor (our own problem): a norm over the channel dimension, not
the last one."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2.0, dim=1)


def get_inputs():
    return [torch.randn(2, 32, 8, 8)]


def get_init_inputs():
    return []
