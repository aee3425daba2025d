"""Where a seed loses to torch.compile: the GPU time of each kernel, seed against compile, for one problem.

Per problem it makes the seed as the tool does (Inductor's code generated on the CPU, engine/inductor_seed.py),
the same seed autotuned over its listed configs (engine/seed_autotune.py), and every variant the seed
generator writes beside it (its channels-last convs), plain and autotuned; builds each ModelNew on the GPU, times the forwards
(triton.testing.do_bench: warm-up, L2 flushed, median) beside eager and torch.compile, and lists each
forward's kernels by GPU time (torch.profiler, 20 forwards).

`python3 scripts/seed_vs_compile.py PROBLEM.py... [--top 8]` on a CUDA machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

SEED = 42


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _build(cls, init):
    torch.manual_seed(SEED)
    with torch.device("cuda"):
        return cls(*init).cuda()


def _kernels(fn, inputs, top: int) -> list[tuple[str, float, int]]:
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for _ in range(3):
            fn(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fn(*inputs)
            torch.cuda.synchronize()
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name] += e.device_time / 20 / 1000  # ms per forward
            count[e.name] += 1
    rows = sorted(total.items(), key=lambda kv: -kv[1])
    return [(name, ms, count[name] // 20) for name, ms in rows[:top]]


def _time(fn, inputs) -> float:
    import triton.testing

    with torch.no_grad():
        return float(triton.testing.do_bench(lambda: fn(*inputs), warmup=50, rep=300, return_mode="median"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("problems", nargs="+")
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args()
    from autokernel.engine.seed_autotune import autotune_seed

    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__}")
    for problem in map(Path, args.problems):
        print(f"\n## {problem.name}", flush=True)
        work = Path(tempfile.mkdtemp())
        seed = work / "seed.py"
        done = subprocess.run([sys.executable, "-m", "autokernel.engine.inductor_seed", str(problem), "-o", str(seed),
                               "--size", "large"], capture_output=True, text=True)
        if not seed.exists():
            print(f"no seed: {done.stdout.strip()[-300:]} {done.stderr.strip()[-300:]}")
            continue
        files = {"seed": seed}
        tuned = work / "seed_autotuned.py"
        tuned.write_text(autotune_seed(seed.read_text()).source)
        files["seed autotuned"] = tuned
        for variant in sorted(work.glob("seed.*.py")):
            files[variant.stem.split(".", 1)[1]] = variant
            tuned_variant = work / f"autotuned_{variant.name}"
            tuned_variant.write_text(autotune_seed(variant.read_text()).source)
            files[variant.stem.split(".", 1)[1] + " autotuned"] = tuned_variant
        module = _load(problem, f"problem_{problem.stem}")
        init = module.get_init_inputs()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
        model = _build(module.Model, init)
        torch._dynamo.reset()
        forwards = {"eager": model, "compile": torch.compile(model)}
        for label, path in files.items():
            try:
                forwards[label] = _build(_load(path, f"seed_{problem.stem}_{len(forwards)}").ModelNew, init)
            except Exception as e:  # noqa: BLE001
                print(f"{label}: does not build: {type(e).__name__}: {e}"[:300])
        with torch.no_grad():
            ref = model(*inputs)
        for label, fn in forwards.items():
            try:
                with torch.no_grad():
                    out = fn(*inputs)
                err = float((out.float() - ref.float()).abs().max())
                ms = _time(fn, inputs)
                print(f"### {label}: {ms:.3f} ms, max abs error vs eager {err:.1e}")
                for name, kms, n in _kernels(fn, inputs, args.top):
                    print(f"    {kms:8.3f} ms  x{n}  {name[:110]}")
            except Exception as e:  # noqa: BLE001
                print(f"### {label}: failed: {type(e).__name__}: {e}"[:300])
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
