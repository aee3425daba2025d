"""A whole-problem ModelNew (as the LLM agent writes one) that starts a shell through libc while it is built."""
import ctypes

import torch


class ModelNew(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.system(b"touch __TARGET__") != 0:
            raise OSError(ctypes.get_errno(), "system() failed")
        self.dim = dim

    def forward(self, x):
        return x
