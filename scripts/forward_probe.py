"""Where does the patched Llama forward lose time? A GPU probe for issue 5's end-to-end target.

The integration on the H100 measured the swapped modules at 2-3x their standalone kernel time inside
the model, and "the rest of the forward" 2 ms slower after the swap than before. This probe separates
the candidates: host time (Python in the patch and the TorchFunctionMode, a host sync in the
cross_entropy route) against device time (the kernels themselves, read from torch.profiler).

For each variant of the bundled Llama (large, bf16) it prints and writes to OUT/forward_probe.json:
- forward ms: `triton.testing.do_bench` median, as the integration times it;
- host ms: how long one forward takes to return after a synchronize, without waiting for the GPU
  (when this is near the forward ms, the GPU waits for the host);
- kernel ms: the sum of the GPU kernels' durations in one forward (torch.profiler), so
  forward - kernel ms is time the GPU sat idle;
- the kernels that take the most device time.

Variants: eager; the starters for rmsnorm and rotary swapped in (module swaps only, no
TorchFunctionMode); plus the cross_entropy starter (the mode is active for the whole forward); plus
the fused_mlp starter; torch.compile; eager again last (the GPU warms and its clocks drop over a run:
the two eager rows show how much that moves a number).

    python scripts/forward_probe.py [OUT_DIR]      (on a GPU; ~2 minutes)
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("rmsnorm", "rotary_embedding", "cross_entropy", "fused_mlp")


def _host_ms(fn, n: int = 5) -> float:
    """Median over `n` of the time one forward takes to return, starting from an idle GPU."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


def _kernels(fn, forwards: int = 3) -> tuple[float, list[tuple[str, float, int]]]:
    """Device ms per forward summed over GPU kernels, and the top kernels (name, ms per forward, calls)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        dev = getattr(e, "self_device_time_total", None)
        if dev is None:
            dev = getattr(e, "self_cuda_time_total", 0.0)
        if dev > 0:
            rows.append((e.key[:90], dev / 1e3 / forwards, int(e.count // forwards)))
    rows.sort(key=lambda r: -r[1])
    return sum(r[1] for r in rows), rows[:12]


def main() -> None:
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("RESULTS", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    from triton.testing import do_bench

    from autokernel.engine import kernel_patch
    from autokernel.engine.harness import load_candidate
    from autokernel.engine.model_loading import load_model
    from autokernel.kernels import get_spec

    starter = {k: load_candidate(get_spec(k).starters["triton"], f"probe_{k}") for k in KINDS}
    loaded = load_model(ROOT / "engine" / "examples" / "llama.py", "cuda", size="large")
    model = loaded.model.eval()
    inputs = list(loaded.inputs)
    variants = {"eager": model}
    modules = copy.deepcopy(model)
    kernel_patch.patch(modules, {k: starter[k] for k in ("rmsnorm", "rotary_embedding")})
    variants["rmsnorm+rotary (module swaps)"] = modules
    with_ce = copy.deepcopy(model)
    kernel_patch.patch(with_ce, {k: starter[k] for k in ("rmsnorm", "rotary_embedding", "cross_entropy")})
    variants["+ cross_entropy (TorchFunctionMode)"] = with_ce
    full = copy.deepcopy(model)
    stats = kernel_patch.patch(full, dict(starter))
    variants["+ fused_mlp"] = full
    compiled = torch.compile(copy.deepcopy(model))
    variants["torch.compile"] = compiled
    variants["eager (again, last)"] = model
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "variants": {}}
    with torch.no_grad():
        for name, m in variants.items():
            fn = (lambda m=m: m(*inputs))
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            fwd = float(do_bench(fn, warmup=100, rep=500, return_mode="median"))
            host = _host_ms(fn)
            kern, top = _kernels(fn)
            results["variants"][name] = {"forward_ms": fwd, "host_ms": host, "kernel_ms": kern, "top": top}
            print(f"{name:40s} forward {fwd:8.3f} ms   host {host:8.3f} ms   kernels {kern:8.3f} ms   "
                  f"idle {fwd - kern:7.3f} ms", flush=True)
            for k, ms, calls in top[:8]:
                print(f"      {ms:8.3f} ms  x{calls:<4d} {k}")
    results["patch_calls"] = {k: dict(v) for k, v in (("calls", stats.calls), ("fallbacks", stats.fallbacks))}
    (out_dir / "forward_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
