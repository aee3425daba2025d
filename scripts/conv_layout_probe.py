"""Why torch.compile beats the seeds on KernelBench's conv problems: the memory layout of its convolutions.

On a GPU, Inductor's layout optimisation makes a graph's convolutions channels-last; the seeds call them as the
Model does (engine/inductor_seed.py turns it off). Per problem this times, in one process, eager, torch.compile,
torch.compile with layout optimisation off, and the eager Model converted to channels-last, and says how far
each output is from eager's and whether it passes KernelBench's check (allclose, atol = rtol = 1e-4). It
answers whether a channels-last seed could be both faster and still correct.

`python3 scripts/conv_layout_probe.py PROBLEM.py... [--json OUT]` on a CUDA machine; one line per problem.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
from pathlib import Path

import torch

TOLERANCE = 1e-4
SEED = 42


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _channels_last(t):
    if isinstance(t, torch.Tensor) and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if isinstance(t, torch.Tensor) and t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t


def _time(fn, inputs) -> float:
    import triton.testing

    with torch.no_grad():
        return float(triton.testing.do_bench(lambda: fn(*inputs), warmup=50, rep=300, return_mode="median"))


def _compare(out, ref) -> dict:
    out, ref = out.float(), ref.float()
    return {"max_abs": float((out - ref).abs().max()),
            "kernelbench_ok": bool(torch.allclose(out, ref, atol=TOLERANCE, rtol=TOLERANCE))}


def probe(path: Path) -> dict:
    from torch._inductor import config

    module = _load(path)
    torch.manual_seed(SEED)
    with torch.device("cuda"):
        model = module.Model(*module.get_init_inputs())
    model = model.cuda()  # training mode, as KernelBench runs it
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    row = {"problem": path.name}
    with torch.no_grad():
        ref = model(*inputs)
        torch._dynamo.reset()
        compiled = torch.compile(model)
        row["compile"] = _compare(compiled(*inputs), ref)
        row["compile_ms"] = _time(compiled, inputs)
        torch._dynamo.reset()
        with config.patch({"layout_optimization": False}):
            flat = torch.compile(model)
            row["compile_nchw"] = _compare(flat(*inputs), ref)
            row["compile_nchw_ms"] = _time(flat, inputs)
        torch._dynamo.reset()
        cl_model = copy.deepcopy(model)
        for p in list(cl_model.parameters()) + list(cl_model.buffers()):
            p.data = _channels_last(p.data)
        cl_inputs = [_channels_last(x) for x in inputs]
        row["eager_cl"] = _compare(cl_model(*cl_inputs), ref)
        row["eager_cl_ms"] = _time(cl_model, cl_inputs)
        row["eager_ms"] = _time(model, inputs)
    return row


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("problems", nargs="+")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("conv_layout_probe: needs a CUDA GPU")
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | cuDNN {torch.backends.cudnn.version()}")
    print("problem | eager ms | compile ms (err, KB ok) | compile NCHW ms (err, ok) | eager channels-last ms (err, ok)")
    rows = []
    for problem in args.problems:
        try:
            row = probe(Path(problem))
        except Exception as e:  # noqa: BLE001 - one line per problem, the batch goes on
            row = {"problem": Path(problem).name, "error": f"{type(e).__name__}: {e}"[:300]}
            print(f"{row['problem']} | error {row['error']}", flush=True)
        else:
            def cell(k):
                return f"{row[k + '_ms']:.3f} ({row[k]['max_abs']:.1e}, {'ok' if row[k]['kernelbench_ok'] else 'NO'})"
            print(f"{row['problem']} | {row['eager_ms']:.3f} | {cell('compile')} | {cell('compile_nchw')} | "
                  f"{cell('eager_cl')}", flush=True)
        rows.append(row)
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
