"""Probe: the CUDA C++ matrix starters (matmul, fused_mlp, flash_attention) against their Triton
starters and PyTorch, checked and timed in one process.

Run on a GPU: `python scripts/mma_probe.py OUT.json` (PROBE_KERNELS="matmul fused_mlp" for a few).
For each kernel it first checks the CUDA starter against an fp32 reference at awkward shapes (edges
of every tile, sizes that take the Hopper path and sizes that fall back to the WMMA kernel, fp16 and
bf16), then times it beside the Triton starter and PyTorch (`triton.testing.do_bench` medians, L2
cleared before each call) at the benchmark's large shapes, and counts the tensor-core instructions
in the built extension's SASS (HGMMA is Hopper's wgmma; HMMA the older mma.sync path). It exists to
develop the CUDA starters on the lent machine in one call; the committed numbers come from the bench.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import traceback

import torch
import torch.nn.functional as F
from triton.testing import do_bench

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_starter(kernel: str, backend: str):
    """A starter's module, imported from its file (as the harness imports candidates)."""
    path = ROOT / "kernels" / kernel / f"starter_{backend}.py"
    spec = importlib.util.spec_from_file_location(f"_probe_{kernel}_{backend}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sass_counts(module_file: str) -> dict[str, int]:
    """How many HGMMA / HMMA / UTMALDG instructions the built extension holds (empty without cuobjdump)."""
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(tool):
        return {}
    sass = subprocess.run([tool, "-sass", module_file], capture_output=True, text=True).stdout
    return {op: len(re.findall(rf"\b{op}\b", sass)) for op in ("HGMMA", "HMMA", "UTMALDG", "LDL", "STL")}


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def randn(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=dtype)


# --- matmul -------------------------------------------------------------------------------------
MATMUL_CHECKS = [(128, 256, 64), (1000, 1000, 1000), (129, 264, 72), (3, 8, 8), (2048, 2056, 520), (77, 300, 136),
                 (300, 77, 40), (4096, 4096, 4096), (64, 512, 8200)]
MATMUL_TIMES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 4096, 11008)]


def matmul_checks(fn) -> list[dict]:
    rows = []
    for dtype in (torch.bfloat16, torch.float16):
        for m, n, k in MATMUL_CHECKS:
            a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
            ref = a.float() @ b.float()
            err = rel_error(fn(a, b), ref)
            rows.append({"shape": [m, n, k], "dtype": str(dtype), "rel_err": err, "ok": err < 2e-2})
    return rows


def matmul_times(fns: dict) -> list[dict]:
    rows = []
    for m, n, k in MATMUL_TIMES:
        a, b = randn(m, k, dtype=torch.bfloat16), randn(k, n, dtype=torch.bfloat16)
        row = {"shape": [m, n, k]}
        for name, fn in fns.items():
            ms = do_bench(lambda: fn(a, b), warmup=50, rep=300, return_mode="median")
            row[name] = {"ms": ms, "tflops": 2 * m * n * k / ms / 1e9}
        rows.append(row)
    return rows


# --- fused_mlp ----------------------------------------------------------------------------------
def mlp_reference(x, wg, wu, wd):
    return (F.silu(x @ wg.T) * (x @ wu.T)) @ wd.T


MLP_CHECKS = [(256, 512, 1024), (100, 264, 520), (1, 64, 136), (4096, 4096, 11008)]
MLP_TIMES = [(4096, 4096, 11008), (8192, 4096, 11008), (8192, 4096, 14336)]


def mlp_inputs(t, h, i, dtype):
    scale = h ** -0.5
    return (randn(t, h, dtype=dtype), randn(i, h, dtype=dtype) * scale, randn(i, h, dtype=dtype) * scale,
            randn(h, i, dtype=dtype) * i ** -0.5)


def mlp_checks(fn) -> list[dict]:
    rows = []
    for dtype in (torch.bfloat16, torch.float16):
        for t, h, i in MLP_CHECKS:
            args = mlp_inputs(t, h, i, dtype)
            ref = mlp_reference(*(x.float() for x in args))
            err = rel_error(fn(*args), ref)
            rows.append({"shape": [t, h, i], "dtype": str(dtype), "rel_err": err, "ok": err < 3e-2})
    return rows


def mlp_times(fns: dict) -> list[dict]:
    rows = []
    for t, h, i in MLP_TIMES:
        args = mlp_inputs(t, h, i, torch.bfloat16)
        row = {"shape": [t, h, i]}
        for name, fn in fns.items():
            ms = do_bench(lambda: fn(*args), warmup=50, rep=300, return_mode="median")
            row[name] = {"ms": ms, "tflops": 6 * t * h * i / ms / 1e9}
        rows.append(row)
    return rows


# --- flash_attention ----------------------------------------------------------------------------
ATTN_CHECKS = [(1, 2, 128, 64), (2, 3, 200, 128), (1, 1, 1000, 64), (2, 4, 1024, 128), (1, 2, 77, 128)]
ATTN_TIMES = [(4, 32, 4096, 128), (8, 16, 2048, 128), (4, 32, 4096, 64)]


def attn_checks(fn) -> list[dict]:
    rows = []
    for dtype in (torch.bfloat16, torch.float16):
        for b, h, s, d in ATTN_CHECKS:
            for causal in (False, True):
                q, k, v = (randn(b, h, s, d, dtype=dtype) for _ in range(3))
                ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
                err = rel_error(fn(q, k, v, causal), ref)
                rows.append({"shape": [b, h, s, d], "causal": causal, "dtype": str(dtype), "rel_err": err,
                             "ok": err < 2e-2})
    return rows


def attn_times(fns: dict) -> list[dict]:
    rows = []
    for b, h, s, d in ATTN_TIMES:
        q, k, v = (randn(b, h, s, d, dtype=torch.bfloat16) for _ in range(3))
        for causal in (False, True):
            row = {"shape": [b, h, s, d], "causal": causal}
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            for name, fn in fns.items():
                ms = do_bench(lambda: fn(q, k, v, causal), warmup=50, rep=300, return_mode="median")
                row[name] = {"ms": ms, "tflops": flops / ms / 1e9}
            rows.append(row)
    return rows


KERNELS = {
    "matmul": (matmul_checks, matmul_times, {"torch": lambda a, b: a @ b}),
    "fused_mlp": (mlp_checks, mlp_times, {"eager": mlp_reference}),
    "flash_attention": (attn_checks, attn_times,
                        {"sdpa": lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c)}),
}


def probe(kernel: str) -> dict:
    checks, times, baselines = KERNELS[kernel]
    from autokernel.kernels.cuda_build import load_cuda_extension

    cuda, triton_starter = load_starter(kernel, "cuda"), load_starter(kernel, "triton")
    result = {"checks": checks(cuda.kernel_fn)}
    result["sass"] = sass_counts(load_cuda_extension(cuda.SOURCE).__file__)
    result["times"] = times({**baselines, "triton": triton_starter.kernel_fn, "cuda": cuda.kernel_fn})
    return result


def main() -> int:
    out_path = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "mma_probe.json")
    wanted = os.environ.get("PROBE_KERNELS", " ".join(KERNELS)).split()
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for kernel in wanted:
        try:
            results[kernel] = probe(kernel)
        except Exception:  # one kernel's failure must not hide the others' results
            results[kernel] = {"error": traceback.format_exc()}
        out_path.write_text(json.dumps(results, indent=1))
        summary = results[kernel]
        if "error" in summary:
            print(kernel, "ERROR", summary["error"][-1500:])
            continue
        bad = [c for c in summary["checks"] if not c["ok"]]
        print(kernel, f"checks {len(summary['checks']) - len(bad)}/{len(summary['checks'])} ok", "sass", summary["sass"])
        for c in bad:
            print("  FAIL", c)
        for row in summary["times"]:
            cells = "  ".join(f"{k} {v['ms']:.3f}ms {v['tflops']:.0f}TF" for k, v in row.items() if isinstance(v, dict))
            print(" ", row["shape"], row.get("causal", ""), cells, f"cuda/triton {row['triton']['ms'] / row['cuda']['ms']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
