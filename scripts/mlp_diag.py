"""Which configs does the fused_mlp starter's autotuner pick, and how fast is each, next to the probe's kernels."""
import importlib.util, pathlib, sys
import torch, triton
from triton.testing import do_bench
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
spec = importlib.util.spec_from_file_location("starter", ROOT / "kernels/fused_mlp/starter_triton.py")
st = importlib.util.module_from_spec(spec); spec.loader.exec_module(st)
import mlp_probe as mp
mp.SMS = torch.cuda.get_device_properties(0).multi_processor_count
for M, K, N in [(4096, 4096, 11008), (8192, 4096, 11008)]:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    wg, wu = [(torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16) for _ in range(2)]
    wd = (torch.randn(K, N, device="cuda") / N ** 0.5).to(torch.bfloat16)
    h = torch.empty(M, N, device="cuda", dtype=torch.bfloat16); out = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
    t = do_bench(lambda: st.kernel_fn(x, wg, wu, wd), return_mode="median")
    print(M, K, N, "starter", round(t, 4), "gate_up best", st._gate_up_tma_tuned.best_config, "down best", st._matmul_tma_tuned.best_config, flush=True)
    for cfg in st.GATE_UP_TMA_TILES:
        bm, bn, bk, w, s = cfg
        tile = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}
        f = lambda: st._gate_up_tma_kernel[st._grid(M, N)](*st._descriptors((x, wg, wu, h), st.GATE_UP_DESCS, tile),
                                                           M, N, K, UPCAST=False, **tile, num_warps=w, num_stages=s)
        g = lambda: mp.run_gate_up(cfg, x, wg, wu, h, False)
        print("  gate_up", cfg, "starter/probe/probe/starter", [round(do_bench(fn, return_mode="median"), 4) for fn in (f, g, g, f)], flush=True)
    for cfg in st.DOWN_TMA_TILES:
        bm, bn, bk, w, s = cfg
        tile = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}
        f = lambda: st._matmul_tma_kernel[st._grid(M, K)](*st._descriptors((h, wd, out), st.MATMUL_DESCS, tile),
                                                          M, K, N, UPCAST=False, **tile, num_warps=w, num_stages=s)
        g = lambda: mp.run_matmul(cfg, h, wd, out, False)
        print("  down", cfg, "starter/probe/probe/starter", [round(do_bench(fn, return_mode="median"), 4) for fn in (f, g, g, f)], flush=True)
    print("  eager", round(do_bench(lambda: torch.nn.functional.linear(torch.nn.functional.silu(torch.nn.functional.linear(x, wg)) * torch.nn.functional.linear(x, wu), wd), return_mode="median"), 4))
