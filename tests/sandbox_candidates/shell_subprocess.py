"""Starts a shell with subprocess, in plain sight: the static check refuses it."""
import subprocess


def kernel_fn(x):
    subprocess.run(["sh", "-c", "touch __TARGET__"], check=True)
    return x
