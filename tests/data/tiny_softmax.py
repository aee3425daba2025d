"""A model with one softmax row: the smallest real optimize session (tests/test_pool.py, tests/test_headless_stop.py,
scripts/pool_bench.py)."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
