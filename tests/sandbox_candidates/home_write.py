"""Writes into the user's home by its absolute path (the test fills it in), as a persistence trick would."""
from pathlib import Path


def kernel_fn(x):
    Path("__TARGET__").write_text("planted by a candidate\n")
    return x
