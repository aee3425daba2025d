"""Which device a run uses, and the switch that makes Triton run on a machine without a GPU."""

from __future__ import annotations

import os

from .errors import UserError


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_device(requested: str | None = None) -> str:
    """`cuda` when asked for or available, else `cpu`; a UserError if cuda is asked for and absent."""
    req = (requested or "auto").lower()
    if req not in ("auto", "cpu", "cuda"):
        raise UserError(f"unknown device {requested!r}: use cpu or cuda")
    if req == "cuda" and not cuda_available():
        raise UserError("--device cuda was asked for, but torch sees no CUDA GPU (torch.cuda.is_available() is False)")
    if req == "auto":
        return "cuda" if cuda_available() else "cpu"
    return req


def use_triton_interpreter(device: str) -> None:
    """On CPU, Triton kernels run under its interpreter. Must happen before any @triton.jit runs
    its decorator, so worker processes call this first thing."""
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    import platform

    return f"CPU ({platform.processor() or platform.machine()}, Triton interpreter)"
