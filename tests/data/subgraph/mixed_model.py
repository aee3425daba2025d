"""A small model whose operations lie outside the nine kernel types, for `autokernel extract` tests:
a GEMM + GELU, a log-softmax, a conv + bias + ReLU, a max-pool, an RMS norm over dim 1, a cumsum and a
cross-entropy loss, plus an attention-style scale + mask + softmax on a transposed view."""

import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 12)
        self.conv = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.conv_bias = nn.Parameter(torch.randn(4, 1, 1))
        self.norm_weight = nn.Parameter(torch.rand(1, 4, 1, 1) + 0.5)
        self.register_buffer("mask", torch.tril(torch.ones(8, 8, dtype=torch.bool)))

    def forward(self, x, image, targets):
        h = F.gelu(self.proj(x))                                # GEMM + activation, [8, 12]
        logp = torch.log_softmax(h, dim=1)                      # log-softmax
        loss = F.cross_entropy(h, targets)                      # a loss
        scores = (h @ h.t()) * 0.25                             # scale + mask + softmax
        attn = torch.softmax(scores.masked_fill(~self.mask, float("-inf")), dim=-1)
        c = torch.relu(self.conv(image) + self.conv_bias)       # conv + bias + ReLU, [2, 4, 8, 8]
        p = F.max_pool2d(c, 2)                                  # pooling, [2, 4, 4, 4]
        n = p * torch.rsqrt(p.pow(2).mean(1, keepdim=True) + 1e-6) * self.norm_weight  # a norm over dim 1
        s = torch.cumsum(n.flatten(2), dim=-1)                  # cumsum
        return loss, logp, attn, s


def get_inputs():
    return [torch.randn(8, 16), torch.randn(2, 2, 8, 8), torch.randint(0, 12, (8,))]


def get_init_inputs():
    return []
