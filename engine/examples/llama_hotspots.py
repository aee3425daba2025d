"""The bundled Llama's three memory-bound hot spots, alone, at the Llama example's own shapes.

What the optimize loop's bandwidth target is measured on: the Llama's `RMSNorm` (its hidden states),
the softmax over attention scores [B, H, S, S] that an attention written without SDPA computes (here in
the model's dtype), and the lm head's `F.cross_entropy` over the vocabulary. With nothing else in the forward, a session visits
all three in Amdahl order within one budget; in the full Llama the SDPA call hides the softmax and the
matmuls take most of the time.

`forward(hidden, scores, logits, targets)` returns `(normed, probs, loss)`. Sizes follow the Llama
example's `AUTOKERNEL_MODEL_SIZE` configs (`large`: bf16, 8 k tokens, 32 heads of 2048 keys).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.engine.examples.llama import CONFIGS, RMSNorm

SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
CFG = CONFIGS[SIZE]


class Model(nn.Module):
    def __init__(self, dim: int, dtype: torch.dtype):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.to(dtype)

    def forward(self, hidden: torch.Tensor, scores: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor):
        normed = self.norm(hidden)
        probs = torch.softmax(scores, dim=-1)
        loss = F.cross_entropy(logits, targets)
        return normed, probs, loss


def get_init_inputs():
    return [CFG["dim"], CFG["dtype"]]


def get_inputs():
    c = CFG
    tokens, dtype = c["batch"] * c["seq"], c["dtype"]
    hidden = torch.randn(c["batch"], c["seq"], c["dim"]).to(dtype)
    scores = (torch.randn(c["batch"], c["heads"], c["seq"], c["seq"]) * 2.0).to(dtype)
    logits = torch.randn(tokens, c["vocab"]).to(dtype)
    targets = torch.randint(0, c["vocab"], (tokens,))
    return [hidden, scores, logits, targets]
