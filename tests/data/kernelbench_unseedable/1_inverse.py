"""A batched matrix inverse (our own problem, kept outside the counted folder): no kernel type of autokernel
computes it, and Inductor cannot seed it (torch.export's graph of `linalg.inv` is not a pure forward the
seed can carry), so the playbook agent reports it skipped, with Inductor's reason."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(x)


def get_inputs():
    return [torch.randn(4, 8, 8) + 8 * torch.eye(8)]


def get_init_inputs():
    return []
