"""A small model with nothing of the nine kernel types: a GELU + scale + cumsum chain (a running sum of
gated features, scaled), for the optimize session's subgraph targets (tests/test_other_targets.py)."""

import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(32) + 0.5)

    def forward(self, x):
        return torch.cumsum(F.gelu(x) * self.scale, dim=-1) * 0.1


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
