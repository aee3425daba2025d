"""Which TF32 rounding the GPU's library convolutions use: a float32 conv with cuDNN's TF32 (PyTorch's
default) against the float64 conv of its inputs rounded to TF32 to nearest (ties away), truncated, and not
rounded at all. The seed's lowered convolutions round to nearest (engine/inductor_seed.py `_round_tf32`);
this says whether that is what cuDNN multiplies, i.e. whether a seed can pass KernelBench's 1e-4 check.

`python3 scripts/tf32_probe.py [--json OUT]` on a CUDA machine; one line per case.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

# (name, input shape, weight shape, conv kwargs): the conv kinds of the KernelBench sample, at small sizes.
CASES = [
    ("conv2d 3x3", (8, 64, 56, 56), (128, 64, 3, 3), {"padding": 1}),
    ("conv2d 5x7 strided", (8, 32, 64, 80), (64, 32, 5, 7), {"stride": 2}),
    ("conv1d dilated", (16, 64, 4096), (128, 64, 3), {"dilation": 2}),
    ("depthwise 3x5", (8, 64, 64, 64), (64, 1, 3, 5), {"groups": 64}),
    ("pointwise 1x1", (8, 64, 64, 64), (128, 64, 1, 1), {}),  # a depthwise-separable conv's second half (86)
    ("conv3d 3x3x3", (4, 16, 16, 32, 32), (32, 16, 3, 3, 3), {"padding": 1}),
    ("conv_transpose2d", (8, 64, 32, 32), (64, 32, 3, 3), {"stride": 2, "transposed": True}),
]


def rna(t: torch.Tensor) -> torch.Tensor:
    bits = t.contiguous().view(torch.int32).to(torch.int64)
    return ((bits + 0x1000) & 0xFFFFE000).to(torch.int32).view(torch.float32)


def trunc(t: torch.Tensor) -> torch.Tensor:
    return (t.contiguous().view(torch.int32) & -0x2000).view(torch.float32)


def conv(x: torch.Tensor, w: torch.Tensor, kw: dict) -> torch.Tensor:
    kw = dict(kw)
    transposed = kw.pop("transposed", False)
    dims = x.dim() - 2
    fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[dims - 1] if transposed else \
        (F.conv1d, F.conv2d, F.conv3d)[dims - 1]
    return fn(x, w, **kw)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("tf32_probe: needs a CUDA GPU")
    rows = []
    torch.manual_seed(0)
    for name, xs, ws, kw in CASES:
        x = torch.randn(xs, device="cuda")
        bound = 1 / (ws[1] * int(torch.tensor(ws[2:]).prod())) ** 0.5  # nn.Conv's default init scale
        w = (torch.rand(ws, device="cuda") * 2 - 1) * bound
        torch.backends.cudnn.allow_tf32 = True
        lib_tf32 = conv(x, w, kw).double()
        torch.backends.cudnn.allow_tf32 = False
        lib_ieee = conv(x, w, kw).double()
        torch.backends.cudnn.allow_tf32 = True
        row = {"case": name, "magnitude": float(lib_ieee.abs().max())}
        for label, round_ in [("exact", lambda t: t), ("nearest", rna), ("truncated", trunc)]:
            want = conv(round_(x).double(), round_(w).double(), kw)
            err = (lib_tf32 - want).abs()
            row[f"tf32_vs_{label}"] = float(err.max())
            row[f"kb_pass_{label}"] = bool(torch.allclose(want, lib_tf32, atol=1e-4, rtol=1e-4))
        row["ieee_vs_exact"] = float((lib_ieee - conv(x.double(), w.double(), kw)).abs().max())
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}
    print(json.dumps(meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
