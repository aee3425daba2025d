"""Probe: the norms' split path for few, wide rows against one program per row, eager and torch.compile.

Run on a GPU (`python scripts/split_rows_probe.py [OUT.json] [--kernels layernorm,rmsnorm] [--programs 4,8,16]`).
KernelBench's 40_LayerNorm (16 rows of 64*256*256 fp32) ran our one-program-per-row starter far behind
torch.compile, which splits such reductions across programs. For each shape and dtype this times, with
triton.testing.do_bench (median), the starter forced onto its row path, the starter forced onto its split
path at each SPLIT_PROGRAMS asked for, the starter as its rule picks, eager PyTorch and
torch.compile of it (the harness's `compiled_baseline`); `--kernels reduce` times the reduce starter's split too; every output is first checked against eager at the spec's tolerance. It decides the
split rule's constants (kernels/<norm>/starter_triton.py, playbook/templates/_rowwise.py) and is kept so
the decision can be re-run on another GPU or Triton. Prints a table and writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import traceback

import torch
import triton
import triton.testing

from autokernel.engine.timing import compiled_baseline
from autokernel.kernels import get_spec

# KernelBench's 40_LayerNorm, fewer and more rows of 1M, a shape near the rule's edge (256 rows: about
# two per SM), and a common LLM shape the rule must leave alone.
SHAPES = ({"rows": 16, "cols": 64 * 256 * 256}, {"rows": 64, "cols": 1 << 20}, {"rows": 256, "cols": 1 << 16},
          {"rows": 4096, "cols": 4096})
DTYPES = (torch.float32, torch.bfloat16)


def _starter(kind: str):
    """A fresh copy of the starter module, so forcing its constants touches nothing else."""
    path = get_spec(kind).starters["triton"]
    spec = importlib.util.spec_from_file_location(f"probe_{kind}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _forced(module, **constants):
    """kernel_fn with the module's split constants set for the call (and put back after)."""
    def call(*args):
        saved = {k: getattr(module, k) for k in constants}
        for k, v in constants.items():
            setattr(module, k, v)
        try:
            return module.kernel_fn(*args)
        finally:
            for k, v in saved.items():
                setattr(module, k, v)
    return call


def _bench(fn, args) -> float:
    return triton.testing.do_bench(lambda: fn(*args), warmup=25, rep=200, return_mode="median")


def probe(kinds, programs) -> list[dict]:
    rows_out = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for kind in kinds:
        spec = get_spec(kind)
        module = _starter(kind)
        eager = spec.eager
        for shape in SHAPES:
            for dtype in DTYPES:
                gen = torch.Generator().manual_seed(0)
                args = spec.make_inputs(shape, dtype, "cuda", gen, "normal")
                plan = module.split_plan(shape["rows"], shape["cols"], sms)
                forms = {
                    "rule": module.kernel_fn,
                    "rows_path": _forced(module, SPLIT_ROWS=0),
                }
                for p in programs:
                    forced = dict(SPLIT_ROWS=1 << 30, SPLIT_MIN_COLS=0, SPLIT_PROGRAMS=p)
                    saved = {k: getattr(module, k) for k in forced}
                    for k, v in forced.items():
                        setattr(module, k, v)
                    splits = module.split_plan(shape["rows"], shape["cols"], sms)
                    for k, v in saved.items():
                        setattr(module, k, v)
                    if splits is not None:  # enough rows already: the plan will not cut them
                        forms[f"split_p{p}"] = _forced(module, **forced)
                forms["eager"] = eager
                compiled, why, _ = compiled_baseline(spec, shape, dtype, args)  # as the harness: dynamic=False
                forms["compile"] = compiled or (lambda *a, why=why: (_ for _ in ()).throw(RuntimeError(why)))
                want = eager(*args)
                atol, rtol = spec.tolerance(dtype)
                record = {"kernel": kind, "shape": shape, "dtype": str(dtype).replace("torch.", ""),
                          "sms": sms, "rule_plan": list(plan) if plan else None,
                          "bytes": spec.bytes_moved(shape, dtype), "ms": {}, "errors": {}}
                for name, fn in forms.items():
                    try:
                        got = fn(*args)
                        if not torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol):
                            raise AssertionError(f"max abs error {(got.float() - want.float()).abs().max().item():.3g}")
                        record["ms"][name] = _bench(fn, args)
                    except Exception as e:  # noqa: BLE001 - a form that fails is reported, the rest still run
                        record["errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"
                        traceback.print_exc(file=sys.stderr)
                rows_out.append(record)
                _print_row(record)
                del args, want
                torch.cuda.empty_cache()
    return rows_out


def _print_row(r: dict) -> None:
    shape = f"{r['shape']['rows']}x{r['shape']['cols']}"
    ms = r["ms"]
    cells = []
    for name, t in ms.items():
        gbs = r["bytes"] / (t * 1e-3) / 1e9
        cells.append(f"{name} {t:.4f} ms ({gbs:.0f} GB/s)")
    vs = ""
    if "rule" in ms and "compile" in ms and "eager" in ms:
        vs = f"  rule vs eager {ms['eager'] / ms['rule']:.2f}x, vs compile {ms['compile'] / ms['rule']:.2f}x"
    plan = r["rule_plan"] or "rows"
    print(f"{r['kernel']:9s} {shape:>16s} {r['dtype']:8s} rule={plan}  " + " | ".join(cells) + vs, flush=True)
    for name, err in r["errors"].items():
        print(f"    {name}: {err}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="split_rows_probe.json")
    parser.add_argument("--kernels", default="layernorm,rmsnorm", help="any of layernorm, rmsnorm, reduce")
    parser.add_argument("--programs", default="4,8,16", help="SPLIT_PROGRAMS values to time the split at")
    a = parser.parse_args()
    if not torch.cuda.is_available():
        print("split_rows_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    records = probe(a.kernels.split(","), [int(p) for p in a.programs.split(",")])
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "method": "triton.testing.do_bench, median of rep=200 ms, warmup 25; outputs checked against eager first",
           "records": records}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
