"""Reads an API key from the environment by name: the static check refuses it."""
import os


def kernel_fn(x):
    raise RuntimeError(f"found {os.environ['OPENAI_API_KEY']}")
