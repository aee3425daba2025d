"""Reads a private key from the user's home by its absolute path (the test fills it in), as a thief would."""
from pathlib import Path


def kernel_fn(x):
    key = Path("__TARGET__").read_text()
    raise RuntimeError(f"read {key!r}")
