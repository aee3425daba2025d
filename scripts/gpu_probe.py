"""One-shot probe of the GPU machine's software: versions and the Triton/torch APIs the tool relies on."""
import inspect, os, shutil, subprocess, sys, time
import torch, triton, triton.language as tl

print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)
print("gpu", torch.cuda.get_device_name(), torch.cuda.get_device_capability(), "SMs", torch.cuda.get_device_properties(0).multi_processor_count)
print("nvcc", shutil.which("nvcc"), "gcc", shutil.which("gcc"), "ninja", shutil.which("ninja"))
print("knobs", hasattr(triton, "knobs"), [a for a in dir(getattr(triton, "knobs", None).runtime) if "hook" in a] if hasattr(triton, "knobs") else None)
print("make_tensor_descriptor", hasattr(tl, "make_tensor_descriptor"), "range warp_specialize", "warp_specialize" in inspect.signature(tl.range.__init__).parameters)
from triton.testing import do_bench
print("do_bench sig", inspect.signature(do_bench))
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t0 = time.time(); f = torch.compile(lambda a: torch.softmax(a, -1)); f(x); torch.cuda.synchronize(); print("torch.compile softmax first call s", round(time.time() - t0, 1))
n = 1 << 30
a = torch.randn(n // 2, device="cuda", dtype=torch.float32); b = torch.empty_like(a)
ms = do_bench(lambda: b.copy_(a), return_mode="median"); print("copy GB/s", round(2 * a.numel() * 4 / ms / 1e6))
m = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
ms = do_bench(lambda: m @ m, return_mode="median"); print("bf16 mm TFLOP/s", round(2 * 8192**3 / ms / 1e9))
