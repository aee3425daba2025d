"""Issue 25's check: KernelBench's own static checker and eval on the `model_new.py` files a batch wrote.

Reads the JSON of `autokernel kernelbench ... --json`, and for each problem that wrote a ModelNew runs
KernelBench's `validate_kernel_static` and `eval_kernel_against_ref` (its loader, its seeds, its
correctness trials and its timing) on the file, then prints its verdict and speedup beside ours.
KernelBench is not a dependency: point `--kernelbench` at a checkout's `src` folder (fetch it; never
vendor it). Its package imports LLM clients (openai, litellm, dotenv) that eval never calls; where one
is not installed (an offline GPU box) an empty module stands in for it, and nothing else is replaced.

    python scripts/kernelbench_own_eval.py --kernelbench ~/KernelBench/src --batch batch.json -o eval.json
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import tempfile
import types
from pathlib import Path

LLM_CLIENTS = {"dotenv": ("load_dotenv",), "openai": ("OpenAI",), "litellm": ("completion",), "tqdm": ("tqdm",)}


def _stand_in_for_missing_clients() -> list[str]:
    """Empty modules for the LLM clients KernelBench imports at package load and eval never calls."""
    missing = []
    for name, attrs in LLM_CLIENTS.items():
        if importlib.util.find_spec(name) is None:
            module = types.ModuleType(name)
            for attr in attrs:
                setattr(module, attr, None)
            sys.modules[name] = module
            missing.append(name)
    return missing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernelbench", required=True, help="a KernelBench checkout's src folder")
    p.add_argument("--batch", required=True, help="the JSON that `autokernel kernelbench --json` printed")
    p.add_argument("--backend", default="triton", choices=["triton", "cuda"])
    p.add_argument("--trials", type=int, default=5, help="KernelBench's correctness trials")
    p.add_argument("--perf-trials", type=int, default=100)
    p.add_argument("-o", "--out", help="write the rows as JSON here (after each problem, so a cut run keeps them)")
    p.add_argument("--shard", default="0/1", metavar="K/N",
                   help="judge only the files K, K+N, K+2N, ... (one shard per GPU, run side by side)")
    args = p.parse_args(argv)
    import torch

    sys.path.insert(0, str(Path(args.kernelbench).expanduser()))
    stood_in = _stand_in_for_missing_clients()
    from kernelbench.eval import eval_kernel_against_ref
    from kernelbench.kernel_static_checker import validate_kernel_static

    if stood_in:
        print(f"stand-ins for {', '.join(stood_in)} (imported by KernelBench's package, not called by eval)")
    doc = json.loads(Path(args.batch).read_text())
    try:
        k, n = (int(x) for x in args.shard.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        p.error(f"--shard must be K/N with 0 <= K < N, not {args.shard!r}")
    rows = []
    for r in doc["problems"][k::n]:
        if not r.get("model_new") or not Path(r["model_new"]).exists():
            print(f"{r['name']}: no ModelNew written ({r['status']})")
            continue
        code, ref = Path(r["model_new"]).read_text(), Path(r["path"]).read_text()
        valid, errors, warnings = validate_kernel_static(code, backend=args.backend, precision="fp32")
        with tempfile.TemporaryDirectory() as build:
            try:
                res = eval_kernel_against_ref(ref, code, num_correct_trials=args.trials,
                                              num_perf_trials=args.perf_trials, measure_performance=True,
                                              build_dir=build, backend=args.backend, precision=torch.float32)
                verdict = {"compiled": res.compiled, "correct": res.correctness, "runtime_us": res.runtime,
                           "ref_runtime_us": res.ref_runtime, "metadata": {k: str(v)[:300] for k, v in res.metadata.items()}}
            except Exception as e:  # KernelBench's own error: reported as it said it
                verdict = {"compiled": False, "correct": False, "error": f"{type(e).__name__}: {e}"[:300]}
        speedup = (verdict.get("ref_runtime_us", -1) / verdict["runtime_us"]
                   if verdict.get("runtime_us", -1) > 0 and verdict.get("ref_runtime_us", -1) > 0 else None)
        row = {"name": r["name"], "ours": {"status": r["status"], "speedup_eager": r.get("speedup_eager"),
                                          "kernels": r.get("kernels")},
               "static": {"valid": valid, "errors": errors, "warnings": warnings},
               "kernelbench": {**verdict, "speedup": speedup}}
        rows.append(row)
        ours = f"{r['speedup_eager']:.2f}x" if r.get("speedup_eager") else "-"
        theirs = f"{speedup:.2f}x" if speedup else "-"
        print(f"{r['name']}: ours {r['status']} {ours} ({', '.join(r.get('kernels') or []) or 'no kernel'}); "
              f"KernelBench static {'ok' if valid else 'REFUSED: ' + '; '.join(errors)[:200]}; eval "
              f"{'correct' if verdict['correct'] else 'INCORRECT'} {theirs}"
              f"{' ' + verdict['error'] if 'error' in verdict else ''}", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
