"""Probe: Hopper TMA forms of the fused_mlp gate/up and down kernels against the starter and cuBLAS.

Run on a GPU (`python scripts/mlp_probe.py [OUT.json]`). For each shape it times, in one process with
`triton.testing.do_bench` medians: the eager three-matmul SwiGLU (cuBLAS), one cuBLAS x @ w_gate.T,
the current Triton starter, and the tensor-descriptor (TMA) kernels below, plain grid and persistent
(tile loop over the SMs), checking each against the fp32 reference. It decides which form the starter
and the template take; it is kept so the decision can be re-run on another GPU or Triton.
"""

import importlib.util
import json
import os
import pathlib
import sys
import traceback

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHAPES = [(8192, 4096, 11008), (4096, 4096, 11008), (8192, 4096, 14336), (16384, 2048, 8192), (2048, 8192, 28672)]


@triton.jit
def _origin(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """First row and column of `tile` in grouped order (GROUP_M tile rows share their B tiles in L2)."""
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    size_m = min(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    return (first_m + (tile % in_group) % size_m) * BLOCK_M, ((tile % in_group) // size_m) * BLOCK_N


@triton.jit
def gate_up_tma(x_desc, wg_desc, wu_desc, h_desc, M, N, K, PROGRAMS,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                FLATTEN: tl.constexpr, WS: tl.constexpr):
    k_tiles = tl.cdiv(K, BLOCK_K)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=FLATTEN, warp_specialize=WS):
        om, on = _origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            ok = ki * BLOCK_K
            x = x_desc.load([om, ok])
            g = tl.dot(x, wg_desc.load([on, ok]).T, g)
            u = tl.dot(x, wu_desc.load([on, ok]).T, u)
        h = g / (1.0 + tl.exp(-g)) * u
        h_desc.store([om, on], h.to(h_desc.dtype))


@triton.jit
def matmul_tma(a_desc, b_desc, c_desc, M, N, K, PROGRAMS,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               FLATTEN: tl.constexpr, WS: tl.constexpr):
    """c = a @ b.T, b [N, K] K-contiguous (nn.Linear layout)."""
    k_tiles = tl.cdiv(K, BLOCK_K)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=FLATTEN, warp_specialize=WS):
        om, on = _origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            ok = ki * BLOCK_K
            acc = tl.dot(a_desc.load([om, ok]), b_desc.load([on, ok]).T, acc)
        c_desc.store([om, on], acc.to(c_desc.dtype))


GATE_UP_CFGS = [(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 128, 32, 8, 5)]
DOWN_CFGS = [(128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 256, 64, 8, 4)]
SMS = 132  # set from the device in main()


def run_gate_up(cfg, x, wg, wu, h, persistent, ws=False):
    bm, bn, bk, warps, stages = cfg
    M, K = x.shape
    N = wg.shape[0]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    programs = min(SMS, tiles) if persistent else tiles
    gate_up_tma[(programs,)](
        TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(wg, [bn, bk]),
        TensorDescriptor.from_tensor(wu, [bn, bk]), TensorDescriptor.from_tensor(h, [bm, bn]),
        M, N, K, programs, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, FLATTEN=persistent, WS=ws,
        num_warps=warps, num_stages=stages)


def run_matmul(cfg, a, b, c, persistent, ws=False):
    bm, bn, bk, warps, stages = cfg
    M, K = a.shape
    N = b.shape[0]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    programs = min(SMS, tiles) if persistent else tiles
    matmul_tma[(programs,)](
        TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bn, bk]),
        TensorDescriptor.from_tensor(c, [bm, bn]), M, N, K, programs,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, FLATTEN=persistent, WS=ws, num_warps=warps, num_stages=stages)


def ms(fn):
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def main():
    global SMS
    SMS = torch.cuda.get_device_properties(0).multi_processor_count
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    spec = importlib.util.spec_from_file_location("starter", ROOT / "kernels/fused_mlp/starter_triton.py")
    starter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(starter)
    print("GPU", torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, "SMs", SMS, flush=True)
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__, "shapes": []}
    torch.manual_seed(0)
    for M, K, N in SHAPES[:int(os.environ.get("PROBE_SHAPES", len(SHAPES)))]:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        wg, wu = [(torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16) for _ in range(2)]
        wd = (torch.randn(K, N, device="cuda") / N ** 0.5).to(torch.bfloat16)
        h = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
        ref = (F.silu(x.float() @ wg.float().T) * (x.float() @ wu.float().T)).to(torch.bfloat16)
        ref_out = (ref.float() @ wd.float().T)
        flop = 6 * M * K * N
        row = {"shape": [M, K, N], "ms": {}}
        eager = lambda: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)
        row["ms"]["eager"] = ms(eager)
        row["ms"]["cublas x@wg.T"] = ms(lambda: F.linear(x, wg))
        row["ms"]["cublas h@wd.T"] = ms(lambda: F.linear(h, wd))
        row["ms"]["starter"] = ms(lambda: starter.kernel_fn(x, wg, wu, wd))
        for persistent in (False, True):
            for ws in ((False, True) if persistent and os.environ.get("PROBE_WS") else (False,)):
                tag = ("persistent" + ("+ws" if ws else "")) if persistent else "grid"
                for cfg in GATE_UP_CFGS:
                    name = f"tma gate_up {tag} {cfg}"
                    try:
                        run_gate_up(cfg, x, wg, wu, h, persistent, ws)
                        err = (h.float() - ref.float()).abs().max().item()
                        row["ms"][name] = ms(lambda: run_gate_up(cfg, x, wg, wu, h, persistent, ws))
                        row.setdefault("err", {})[name] = err
                    except Exception as e:  # a config that does not compile is reported, not fatal
                        row.setdefault("errors", {})[name] = f"{type(e).__name__}: {str(e)[:300]}"
                for cfg in DOWN_CFGS:
                    name = f"tma down {tag} {cfg}"
                    try:
                        h.copy_(ref)
                        run_matmul(cfg, h, wd, out, persistent, ws)
                        err = (out.float() - ref_out).abs().max().item()
                        row["ms"][name] = ms(lambda: run_matmul(cfg, h, wd, out, persistent, ws))
                        row.setdefault("err", {})[name] = err
                    except Exception as e:
                        row.setdefault("errors", {})[name] = f"{type(e).__name__}: {str(e)[:300]}"
        best_gu = min((v, k) for k, v in row["ms"].items() if k.startswith("tma gate_up"))
        best_dn = min((v, k) for k, v in row["ms"].items() if k.startswith("tma down"))
        row["best_tma_total"] = best_gu[0] + best_dn[0]
        row["best"] = [best_gu[1], best_dn[1]]
        e = row["ms"]["eager"]
        print(f"\n{M}x{K}x{N}: eager {e:.3f} ms ({flop / e / 1e9:.0f} TFLOP/s) | starter {row['ms']['starter']:.3f} "
              f"({e / row['ms']['starter']:.2f}x) | best TMA {row['best_tma_total']:.3f} ({e / row['best_tma_total']:.2f}x) "
              f"= {best_gu[0]:.3f} {best_gu[1]} + {best_dn[0]:.3f} {best_dn[1]} | cublas gate {row['ms']['cublas x@wg.T']:.3f} "
              f"down {row['ms']['cublas h@wd.T']:.3f}", flush=True)
        for k, v in sorted(row["ms"].items(), key=lambda kv: kv[1]):
            print(f"  {v:8.4f}  {k}  err={row.get('err', {}).get(k, '')}")
        for k, v in row.get("errors", {}).items():
            print("  ERROR", k, v)
        report["shapes"].append(row)
        del x, wg, wu, wd, h, out, ref, ref_out
        torch.cuda.empty_cache()
    if len(sys.argv) > 1:
        pathlib.Path(sys.argv[1]).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
