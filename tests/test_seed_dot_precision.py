"""A seed's matrix products take the precision of the problem's reference at run time: on a GPU cuDNN runs a
float32 convolution in TF32 by default, so a lowered convolution's `tl.dot` rounds its inputs to TF32 the way
the library does (to nearest, ties away), else KernelBench's 1e-4 float32 check fails it against the very
reference it is compared with; on the CPU, and for a problem whose products are matmuls, it stays IEEE."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from problem_support import inductor_seeds
from test_library_leave import CONV_ONLY

# Runs the seed with its precision rule forced each way; prints the largest differences from the float64
# convolution of the inputs as given, rounded to nearest (ties away) and truncated to TF32's mantissa.
_PROBE = textwrap.dedent('''
    import importlib.util, json, sys
    import torch
    import torch.nn.functional as F

    spec = importlib.util.spec_from_file_location("seed", sys.argv[1])
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)

    def rna(t):
        bits = t.contiguous().view(torch.int32).to(torch.int64)
        return (((bits + 0x1000) & 0xFFFFE000).to(torch.int32)).view(torch.float32)

    def trunc(t):
        return (t.contiguous().view(torch.int32) & -0x2000).view(torch.float32)

    torch.manual_seed(42)
    model = seed.ModelNew(*seed.get_init_inputs())
    (x,) = seed.get_inputs()
    x = x * 37.0  # values whose low mantissa bits are far from zero
    w, b = model.conv.weight.detach(), model.conv.bias.detach()

    def conv(round_):
        return F.conv2d(round_(x).double(), round_(w).double(), b.double())

    out = {"rule_on_cpu": seed._tf32_like_reference(x), "dots": seed.REFERENCE_DOTS}
    with torch.no_grad():
        ieee = model(x).double()
        seed._tf32_like_reference = lambda tensor: True
        tf32 = model(x).double()
    exact, nearest, truncated = conv(lambda t: t), conv(rna), conv(trunc)
    out["ieee_vs_exact"] = float((ieee - exact).abs().max())
    out["tf32_vs_nearest"] = float((tf32 - nearest).abs().max())
    out["tf32_vs_exact"] = float((tf32 - exact).abs().max())
    out["truncated_vs_nearest"] = float((truncated - nearest).abs().max())
    print(json.dumps(out))
''')


def test_a_lowered_convolution_rounds_its_products_like_the_tf32_reference(tmp_path):
    problem = tmp_path / "conv_only.py"
    problem.write_text(textwrap.dedent(CONV_ONLY))
    (seed,) = inductor_seeds([problem], tmp_path / "seed.py")
    source = (tmp_path / "seed.py").read_text()
    assert "_dot_like_reference(" in source and "DOT_TF32=_dot_tf32" in source
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    done = subprocess.run([sys.executable, str(probe), seed["seed"]], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["dots"] == "convolution" and got["rule_on_cpu"] is False  # the CPU's reference is IEEE
    assert got["ieee_vs_exact"] < 1e-4, got
    # Forced to TF32, the seed multiplies exactly the nearest-rounded inputs (only the sum's order differs),
    # which is neither the exact product nor the truncated one.
    assert got["tf32_vs_nearest"] < 1e-4, got
    assert got["tf32_vs_exact"] > 10 * got["tf32_vs_nearest"], got
    assert got["truncated_vs_nearest"] > 10 * got["tf32_vs_nearest"], got
