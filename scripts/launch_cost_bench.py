"""The host cost of the softmax and cross-entropy starters' launchers, before and after cutting it.

At launch-bound sizes (H100 run 26: the softmax starter at 4096x4096 bf16, the cross-entropy starter at
1024x32000) the wall clock of a call is the host's: the launcher's Python plus Triton's launch path. This
times the first part alone: each starter's `kernel_fn` with every Triton kernel in its module replaced
by a launch that does nothing, so neither the interpreter (on CPU) nor the GPU is in the picture, only
the wrapper's shape checks, allocations and launch arithmetic. "before" is the starters' code at
`fair_timing_probe.BEFORE_COMMIT` (checked against `git show` where git is at hand), "after" the files as
they are. The fastest of several repeats counts.

    python scripts/launch_cost_bench.py                  (CPU tensors, small shapes on the same code paths)
    python scripts/launch_cost_bench.py --device cuda    (the run-26 shapes on the GPU, launches still stubbed)

Results: docs/results/ (never in a test: a test asserts behaviour, not microseconds).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from fair_timing_probe import (BEFORE_COMMIT, BEFORE_CROSS_ENTROPY, BEFORE_SOFTMAX_LAUNCHER,  # noqa: E402
                               before_source)

# (kernel type, GPU shape as in the fairness probe, a CPU shape that takes the same launcher path)
CASES = [
    ("softmax", {"rows": 4096, "cols": 4096}, {"rows": 64, "cols": 4096}),
    ("cross_entropy", {"rows": 1024, "vocab": 32000}, {"rows": 64, "vocab": 32000}),
]


class NoLaunch:
    """Stands in for a @triton.jit kernel: `kernel[grid](...)` returns at once and counts the launch."""

    def __init__(self) -> None:
        self.launches = 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches += 1
        return launch


def load_stubbed(source: str, name: str) -> tuple:
    """The module of `source` with its Triton kernels replaced by `NoLaunch`es: (module, the stand-ins)."""
    import triton

    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stubs = {}
    for attr, value in list(vars(module).items()):
        if isinstance(value, triton.runtime.jit.JITFunction):
            stubs[attr] = NoLaunch()
            setattr(module, attr, stubs[attr])
    return module, stubs


def git_matches(kind: str) -> str:
    """Whether the probe's copy of the old starter is what git holds at BEFORE_COMMIT ('' if git can't say):
    the whole cross-entropy file's code; the softmax launcher (its kernels are today's, stubbed here)."""
    rel = f"kernels/{kind}/starter_triton.py"
    try:
        old = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE_COMMIT}:{rel}"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    copy = BEFORE_CROSS_ENTROPY if kind == "cross_entropy" else BEFORE_SOFTMAX_LAUNCHER
    same = copy.strip() in old
    return "matches git" if same else "DIFFERS FROM GIT"


def per_call_us(fn, args: tuple, number: int, repeat: int) -> float:
    fn(*args)  # per-shape caches filled, as in a timed run after its warm-up
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    from autokernel.kernels import get_spec
    from autokernel.kernels.spec import dtype_from_name

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--number", type=int, default=2000, help="calls per repeat")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    dtype = dtype_from_name(args.dtype)
    print(f"launcher host time per call, Triton launches stubbed, {args.device}, {args.dtype}; "
          f"before = {BEFORE_COMMIT}")
    for kind, gpu_shape, cpu_shape in CASES:
        spec = get_spec(kind)
        shape = gpu_shape if args.device == "cuda" else cpu_shape
        inputs = tuple(spec.make_inputs(shape, dtype, args.device, torch.Generator().manual_seed(0), "normal"))
        line = []
        for when, source in (("before", before_source(kind)), ("after", spec.starters["triton"].read_text())):
            module, stubs = load_stubbed(source, f"_{kind}_{when}")
            us = per_call_us(module.kernel_fn, inputs, args.number, args.repeat)
            launches = sum(s.launches for s in stubs.values()) / (1 + args.number * args.repeat)
            line.append(f"{when} {us:.2f} us ({launches:g} launches)")
        check = git_matches(kind)
        print(f"{kind} {shape}: " + ", ".join(line) + (f"  [before: {check}]" if check else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
