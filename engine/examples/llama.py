"""A Llama-style decoder in KernelBench form: the bundled example model.

Pieces written the way model code usually writes them, so the profiler has real work to do:
a hand-written `RMSNorm` (pow/mean/rsqrt/mul, fp32 math), `RotaryEmbedding` as its own module
(cos/sin buffers [S, D], rotate-half convention: x*cos + rotate_half(x)*sin on x [B, H, S, D]),
causal attention through `F.scaled_dot_product_attention(is_causal=True)`, a SwiGLU `FeedForward`
(w_down(silu(w_gate(x)) * w_up(x)), nn.Linear without bias), and an lm head with `F.cross_entropy`.

`forward(input_ids, targets)` returns `(loss, logits)`: the loss is what training would use, and
the logits let an integration check compare every output, not just one averaged scalar.

Size from `AUTOKERNEL_MODEL_SIZE`: `small` (fp32, a few seconds to profile on a CPU) or `large`
(bf16, ~1.1 B parameters, 8 k tokens per forward: fills an H100 and stays far under 40 GB).
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

CONFIGS = {
    "small": dict(vocab=1024, dim=256, layers=2, heads=4, hidden=688, batch=2, seq=128, dtype=torch.float32),
    "large": dict(vocab=32000, dim=4096, layers=4, heads=32, hidden=11008, batch=4, seq=2048, dtype=torch.bfloat16),
}
SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
CFG = CONFIGS[SIZE]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotates q or k [B, H, S, D] by position: x*cos + rotate_half(x)*sin, cos/sin [S, D]."""

    def __init__(self, head_dim: int, max_seq: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[-2]
        cos, sin = self.cos[:seq], self.sin[:seq]
        return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, max_seq: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, max_seq)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        q, k = self.rotary(q), self.rotary(k)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, d))


class FeedForward(nn.Module):
    """SwiGLU: w_down(silu(w_gate(x)) * w_up(x))."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, max_seq: int):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, max_seq)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, hidden: int, max_seq: int, dtype: torch.dtype):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, hidden, max_seq) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        for p in self.parameters():  # small init keeps activations tame in bf16
            if p.dim() == 2:
                nn.init.normal_(p, std=1.0 / math.sqrt(p.shape[1]))
        self.to(dtype)

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.lm_head(self.norm(x))
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return loss, logits


def get_init_inputs():
    c = CFG
    return [c["vocab"], c["dim"], c["layers"], c["heads"], c["hidden"], c["seq"], c["dtype"]]


def get_inputs():
    c = CFG
    ids = torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    targets = torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    return [ids, targets]
