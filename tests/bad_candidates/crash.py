"""Kills its own process, as a segfaulting extension would."""
import ctypes
import torch
import triton
import triton.language as tl


def kernel_fn(x):
    ctypes.string_at(0)  # read address 0: SIGSEGV
