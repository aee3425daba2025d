"""Few, wide rows are split across programs: the norms' (and reduce's) starters and templates, their rule.

A LayerNorm over several trailing dims is a handful of rows of millions of elements; one program per
row leaves most SMs idle. The starters and the templates at their defaults cut such rows into chunks
over a 2-D grid (partial statistics, then a merge where each chunk is normalised). Here the rule is
forced down to small rows so the CPU interpreter runs the split path in a real subprocess, every
dtype, with and without weight and bias, against torch in float64 at the spec's tolerances.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autokernel.kernels import get_spec
from autokernel.playbook.templates import _rowwise, get_template

# Runs one candidate (a starter file or a template rendered at its defaults) with the split rule
# lowered to small rows, records every launch's grid, and compares each output with torch.
SPLIT_RUN = r'''
import json, sys, types
import torch
import torch.nn.functional as F
from triton.runtime.interpreter import InterpretedFunction
from autokernel.kernels import get_spec

kind, where, source = sys.argv[1], sys.argv[2], sys.argv[3]
grids = []
_run = InterpretedFunction.run
def run(self, *args, grid, **kw):
    grids.append([self.__name__, list(grid) if isinstance(grid, tuple) else grid])
    return _run(self, *args, grid=grid, **kw)
InterpretedFunction.run = run

module = types.ModuleType("candidate")
exec(compile(source, where, "exec"), module.__dict__)
# The same constants in a starter and in a rendered template: rows from 4096 wide are split, into
# chunks of several 256-wide tiles (so each lane's running statistics see several elements).
module.SPLIT_MIN_COLS, module.SPLIT_BLOCK = 4096, 256

spec = get_spec(kind)
gen = torch.Generator().manual_seed(0)
results = []
# The second shape has a ragged last chunk and rows with a mean far from zero: statistics taken as
# E[x^2] - mean^2 in fp32 miss the fp32 tolerance there by an order of magnitude, torch does not.
for rows, cols, offset in ((4, 8192, 0.0), (3, 9000, 100.0)):
    offset = 0.0 if kind == "reduce" else offset  # a row's sum of 100s overflows fp16
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = (offset + torch.randn(rows, cols, generator=gen)).to(dtype)
        w = (1 + 0.1 * torch.randn(cols, generator=gen)).to(dtype)
        b = (0.1 * torch.randn(cols, generator=gen)).to(dtype)
        for affine in ("weight+bias", "weight", "none"):
            ww = w if affine != "none" else None
            bb = b if affine == "weight+bias" else None
            xd = x.double()
            if kind == "layernorm":
                got = module.kernel_fn(x, ww, bb, 1e-5)
                want = F.layer_norm(xd, (cols,), None if ww is None else ww.double(),
                                    None if bb is None else bb.double(), 1e-5)
            elif kind == "reduce":
                if affine != "none":
                    continue
                got = module.kernel_fn(x)
                want = xd.sum(-1)
            else:
                if affine == "weight+bias":
                    continue
                got = module.kernel_fn(x, ww, 1e-6)
                want = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
                want = want if ww is None else want * ww.double()
            atol, rtol = spec.tolerance(dtype)
            err = ((got.double() - want.to(dtype).double()).abs() - rtol * want.abs()).max().item()
            results.append({"case": f"{rows}x{cols}+{offset} {dtype} {affine}", "dtype_kept": got.dtype == dtype,
                            "finite": bool(torch.isfinite(got).all()),
                            "excess": err - atol})
print(json.dumps({"results": results, "grids": grids}))
'''


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"split_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rendered(template, folder: Path, **params):
    """The template's candidate for these knob values, imported from a file in `folder` (new), where Triton
    can read its kernels' source; none is launched."""
    folder.mkdir()
    path = folder / "candidate.py"
    path.write_text(template.render({**template.DEFAULTS, **params}))
    return _load(path)


def _source(kind: str, origin: str) -> str:
    if origin == "starter":
        return get_spec(kind).starters["triton"].read_text()
    template = get_template(kind)
    return template.render(template.DEFAULTS)


@pytest.mark.parametrize("kind,origin", [("layernorm", "starter"), ("layernorm", "template"), ("rmsnorm", "starter"),
                                         ("rmsnorm", "template"), ("reduce", "starter"), ("reduce", "template")])
def test_split_rows_match_torch_in_every_dtype_with_and_without_affine(kind, origin):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SPLIT_RUN, kind, f"{kind}_{origin}.py", _source(kind, origin)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # Every row was split: launches over a 2-D grid of (rows, several chunks), never one program per row
    # (reduce adds a row's partials in a 1-D launch of its own, which reads no x).
    split = [g for _, g in out["grids"] if len(g) == 2 and g[1] > 1]
    assert {rows for rows, _ in split} == {4, 3}
    assert all("partials" in name for name, g in out["grids"] if g not in split), out["grids"]
    bad = [r for r in out["results"] if not r["excess"] <= 0 or not r["dtype_kept"] or not r["finite"]]
    assert not bad, bad
    assert len(out["results"]) == {"layernorm": 18, "rmsnorm": 12, "reduce": 6}[kind]


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm", "reduce"])
def test_the_rule_splits_few_wide_rows_and_leaves_many_rows_alone(kind):
    starter = _load(get_spec(kind).starters["triton"])
    sms = 132
    # KernelBench's LayerNorm over the last three dims: 16 rows of 64*256*256.
    chunks, chunk, block = starter.split_plan(16, 64 * 256 * 256, sms)
    assert chunks * chunk >= 64 * 256 * 256 > (chunks - 1) * chunk and chunk % block == 0
    assert 16 * chunks >= sms  # every SM gets work
    chunks, chunk, block = starter.split_plan(4, 20000, sms)
    assert chunk >= block and chunks == -(-20000 // chunk)  # never less than a tile per program
    chunks, _, _ = starter.split_plan(64, 1 << 20, sms)
    assert 64 * chunks >= sms
    assert starter.split_plan(4096, 4096, sms) is None  # enough rows: one program per row
    assert starter.split_plan(8192, 1 << 20, sms) is None
    assert starter.split_plan(16, 1024, sms) is None  # a row that fits registers stays whole
    # The rule follows the SM count: the same rows split on a small GPU less than on a large one.
    assert starter.split_plan(16, 1 << 20, 8)[0] < starter.split_plan(16, 1 << 20, sms)[0]


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_the_template_defaults_are_the_starters_rule_and_the_knobs_say_when_they_act(kind, tmp_path):
    starter = _load(get_spec(kind).starters["triton"])
    template = get_template(kind)
    assert template.DEFAULTS["split_rows"] == starter.SPLIT_ROWS
    assert template.DEFAULTS["split_programs"] == starter.SPLIT_PROGRAMS
    assert (_rowwise.SPLIT_MIN_COLS, _rowwise.SPLIT_BLOCK) == (starter.SPLIT_MIN_COLS, starter.SPLIT_BLOCK)
    wide = template.effective(template.DEFAULTS, {"rows": 16, "cols": 1 << 22}, "fp32")
    assert (wide["split_rows"], wide["split_programs"]) == (4, 8)
    narrow = template.effective(template.DEFAULTS, {"rows": 16, "cols": 4096}, "fp32")
    assert narrow["split_rows"] is None and narrow["split_programs"] is None  # rows that fit are never split
    off = template.effective({**template.DEFAULTS, "split_rows": 0}, {"rows": 16, "cols": 1 << 22}, "fp32")
    assert off["split_rows"] == 0 and off["split_programs"] is None
    # Off, the rendered file's rule splits no shape at all.
    never = _rendered(template, tmp_path / f"{kind}_never", split_rows=0)
    assert all(never.split_plan(rows, 1 << 22, 132) is None for rows in (1, 16, 64))
    assert _rendered(template, tmp_path / f"{kind}_defaults").split_plan(16, 1 << 22, 132) is not None


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU run compiles and runs the starters for real")
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-affine"])
def test_the_split_kernels_compile_for_hopper(affine):
    """The interpreter cannot see what only the compiler rejects: the split launches, compiled for sm_90,
    with weight and bias and without (the other branch of each HAS_W/HAS_B)."""
    from test_kernel_library import compile_for_hopper

    cols = 1 << 20  # 4 rows of 1M on the CPU's stand-in SM count: split
    gain = [[cols], "bfloat16"] if affine else None
    args = {"layernorm": [[[4, cols], "bfloat16"], gain, gain], "rmsnorm": [[[4, cols], "float32"], gain],
            "reduce": [[[4, cols], "bfloat16"]]}
    assert compile_for_hopper([(kind, kind, {}, a) for kind, a in args.items()]) == {}
