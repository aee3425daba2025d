"""A small vision transformer in KernelBench form, written the way such models often are and not the way
the tool's kernel types expect: a conv patch embedding with GroupNorm, pre-norm blocks with nn.LayerNorm,
attention computed by hand (q @ k^T, scale, masked_fill of padded patches, softmax, @ v) instead of SDPA,
a GELU MLP (not SwiGLU), mean pooling over the tokens and a linear head. `forward(images, keep)` returns
the logits; `keep` marks which patches are real (the rest are padding, masked out of attention).

Size from `AUTOKERNEL_MODEL_SIZE`: `small` (profiles in seconds on a CPU) or `large` (224x224 images,
batch 64, width 768, bf16, for a GPU).
"""

from __future__ import annotations

import os

import torch
from torch import nn

CONFIGS = {
    "small": dict(batch=2, image=32, patch=8, width=64, heads=4, depth=2, classes=10, dtype=torch.float32),
    "large": dict(batch=64, image=224, patch=16, width=768, heads=12, depth=6, classes=1000, dtype=torch.bfloat16),
}
SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
CFG = CONFIGS[SIZE]


class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), pad)
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, image: int, patch: int, width: int, heads: int, depth: int, classes: int, dtype: torch.dtype):
        super().__init__()
        self.embed = nn.Conv2d(3, width, patch, stride=patch)
        self.embed_norm = nn.GroupNorm(8, width)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)
        self.to(dtype)

    def forward(self, images: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = self.embed_norm(self.embed(images)).flatten(2).transpose(1, 2) + self.pos
        pad = ~keep
        for block in self.blocks:
            x = block(x, pad)
        x = self.norm(x)
        pooled = (x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
        return self.head(pooled)


def get_init_inputs() -> list:
    return [CFG["image"], CFG["patch"], CFG["width"], CFG["heads"], CFG["depth"], CFG["classes"], CFG["dtype"]]


def get_inputs() -> list:
    g = torch.Generator().manual_seed(0)
    images = torch.randn(CFG["batch"], 3, CFG["image"], CFG["image"], generator=g).to(CFG["dtype"])
    patches = (CFG["image"] // CFG["patch"]) ** 2
    keep = torch.ones(CFG["batch"], patches, dtype=torch.bool)
    keep[::2, patches - patches // 4:] = False  # every other image padded: its last quarter of patches masked
    return [images, keep]
