"""A small ResNet-style image classifier in KernelBench form: conv, batchnorm, relu, pooling,
residual adds, a linear head and a softmax. `forward(images)` returns class probabilities.

Size from `AUTOKERNEL_MODEL_SIZE`: `small` (32x32 images, profiles in a second on a CPU) or
`large` (224x224, batch 64, bf16-friendly widths, for a GPU).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

CONFIGS = {
    "small": dict(batch=8, image=32, width=32, stages=3, classes=10),
    "large": dict(batch=64, image=224, width=64, stages=4, classes=1000),
}
SIZE = os.environ.get("AUTOKERNEL_MODEL_SIZE") or ("large" if torch.cuda.is_available() else "small")
CFG = CONFIGS[SIZE]


class ResidualBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.skip(x))


class Model(nn.Module):
    def __init__(self, width: int, stages: int, classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        blocks, c = [], width
        for i in range(stages):
            blocks.append(ResidualBlock(c, width * 2**i, stride=1 if i == 0 else 2))
            c = width * 2**i
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(c, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(images))
        x = self.pool(x).flatten(1)
        return torch.softmax(self.head(x), dim=-1)


def get_init_inputs():
    return [CFG["width"], CFG["stages"], CFG["classes"]]


def get_inputs():
    return [torch.randn(CFG["batch"], 3, CFG["image"], CFG["image"])]
