"""A Smooth L1 (Huber) loss over a batch, mean-reduced (our own problem, KernelBench level-1 style)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(predictions, targets)


def get_inputs():
    return [torch.randn(32, 64), torch.randn(32, 64)]


def get_init_inputs():
    return []
