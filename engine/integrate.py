"""Put the kept kernels back into the user's model, prove it still computes the same, time it.

The engine process never imports a kernel, so integration runs in a subprocess
(`python -m autokernel.engine.integrate REQUEST.json`) that sets up Triton's interpreter on CPU
first, loads the model, patches a copy with `kernel_patch.patch`, compares the patched model's
outputs with the untouched original on several fresh inputs, and times four forwards end to end in
interleaved rounds: eager, torch.compile, patched, patched + torch.compile (the kernels are custom
operators Inductor compiles around; its outputs are checked too), recommending the fastest correct
one. A compile that fails (an odd model, no C++ compiler on the CPU) is reported and left out.
It answers one JSON line; the parent turns it into an `IntegrationResult` event.

Mode `kernelbench` (a KernelBench problem, `engine/model_new.py`): the parent also writes a standalone
`model_new.py` defining `ModelNew` beside the kernels, and the child checks and times that file the
KernelBench way instead of comparing a patched copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .events import IntegrationResult
from .forward_timing import (SiteTimer, breakdown_text, compiled_forward, round_speedups, site_breakdown,
                             time_interleaved)

# Model-level tolerance per dtype, relative to the output's largest magnitude: kernels that each pass
# their own check still round differently, and the differences add up through the layers.
MODEL_TOLERANCE = {"fp32": (1e-3, 1e-2), "fp16": (1e-2, 2e-2), "bf16": (2e-2, 5e-2)}
RESULT_PREFIX = "AUTOKERNEL_INTEGRATION "
INTEGRATION_MODES = ("model", "kernelbench")
# Fresh inputs the outputs are compared on, per mode and device (the interpreter makes CPU trials slow).
TRIALS = {"model": {"cuda": 3, "cpu": 2}, "kernelbench": {"cuda": 5, "cpu": 3}}
TIMING_ROUNDS = 5  # interleaved rounds of the four forwards on a GPU (forward_timing.time_interleaved)
SITE_TURNS = 8  # forwards of each model, taking turns, behind the per-site breakdown on a GPU


# -- parent side ---------------------------------------------------------------------------------------
def integrate_session_kernels(model_path: str, device: str, kernels: list[dict], workdir: Path,
                              size: str | None = None, trials: int | None = None, timeout_s: float = 900.0,
                              should_stop: Callable[[], bool] | None = None,
                              mode: str = "model", compile: bool = True) -> IntegrationResult | None:
    """Write the kernels and a request under `workdir`, run the integration subprocess, read its answer.

    `kernels`: [{kind, candidate_id, source, dtype}]; `trials` defaults by mode and device; `compile=False`
    leaves out the two torch.compile forwards (a compile takes tens of seconds on the CPU). Never raises
    for a kernel's or model's fault: a failed integration is an `IntegrationResult` with `correct=False`
    and the reason in `detail`.
    Returns None if `should_stop()` turned true first (the subprocess is killed; nothing was decided).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    entries = []
    for k in kernels:
        path = workdir / f"{k['kind']}.py"
        path.write_text(k["source"])
        entries.append({"kind": k["kind"], "candidate_id": k.get("candidate_id"), "path": str(path),
                        "dtype": k.get("dtype"), "backend": k.get("backend") or "triton"})
    request = {"model_path": str(model_path), "device": device, "size": size, "mode": mode, "kernels": entries,
               "trials": trials or TRIALS[mode]["cuda" if device == "cuda" else "cpu"], "compile": compile}
    if mode == "kernelbench":
        from .model_new import write_model_new

        request["model_new"] = str(write_model_new(workdir, model_path, entries))
    req_path = workdir / "request.json"
    req_path.write_text(json.dumps(request, indent=2))
    env = dict(os.environ)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "autokernel.engine.integrate", str(req_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            stopped = should_stop is not None and should_stop()
            if stopped or time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                if stopped:
                    return None
                return IntegrationResult(replaced=entries, correct=False, meaningful=device == "cuda",
                                         detail=f"integration timed out after {timeout_s:.0f} s")
    proc.stdout, proc.stderr = stdout, stderr
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            data = json.loads(line[len(RESULT_PREFIX):])
            return IntegrationResult(**data)
    tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
    return IntegrationResult(replaced=entries, correct=False, meaningful=device == "cuda",
                             detail=f"integration process exited {proc.returncode}: " + " | ".join(tail))


# -- child side ----------------------------------------------------------------------------------------
FORWARDS = {"eager": "eager", "compile": "torch.compile", "patched": "patched",
            "patched_compile": "patched + torch.compile"}
ROUND_LABELS = {"eager": "eager", "compile": "torch.compile", "patched_compile": "torch.compile (both compiled)"}


def forwards_text(ms: dict, recommended: str, meaningful: bool = True) -> str:
    """'forward ms: eager 3.1, torch.compile 2.2, patched 2.9, patched + torch.compile 1.9; fastest:
    patched + torch.compile' (a forward that was not run, or failed to compile, is absent)."""
    parts = ", ".join(f"{FORWARDS[n]} {ms[n]:.4g}" for n in FORWARDS if ms.get(n) is not None)
    return f"forward ms: {parts}; fastest: {FORWARDS.get(recommended, recommended)}" + (
        "" if meaningful else " (CPU: not meaningful)")


def _compare(ref: list, out: list, atol: float, rtol: float, label: str) -> tuple[float, list[str]]:
    """(max abs error, problems) of a patched forward's output tensors against the original's."""
    import torch

    if len(ref) != len(out) or not ref:
        return 0.0, [f"{label}: the patched model returned {len(out)} tensors, expected {len(ref)}"]
    max_err, problems = 0.0, []
    for r, o in zip(ref, out):
        if r.shape != o.shape:
            problems.append(f"{label}: shape {tuple(o.shape)} != {tuple(r.shape)}")
            continue
        err = float((o.double() - r.double()).abs().max()) if r.numel() else 0.0
        scale = float(r.double().abs().max()) if r.numel() else 0.0
        if not (err <= atol + rtol * scale) or bool(torch.isnan(o).any()) != bool(torch.isnan(r).any()):
            problems.append(f"{label}: max abs error {err:.3g} > {atol} + {rtol} x {scale:.3g}")
        max_err = max(max_err, err)
    return max_err, problems


def _load_kernel(path: str, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"autokernel_integrated_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.kernel_fn


def _fresh_like(x: Any, gen):
    """An input of the same kind as `x` with new values (float: same mean and spread; ints: same range)."""
    import torch

    if isinstance(x, (list, tuple)):
        return type(x)(_fresh_like(v, gen) for v in x)
    if isinstance(x, dict):
        return {k: _fresh_like(v, gen) for k, v in x.items()}
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return x
    if x.is_floating_point():
        std = float(x.float().std()) if x.numel() > 1 else 1.0
        mean = float(x.float().mean())
        t = torch.randn(x.shape, generator=gen, dtype=torch.float32) * (std if std > 0 else 1.0) + mean
        return t.to(dtype=x.dtype, device=x.device)
    if x.dtype == torch.bool:
        return x.clone()
    lo, hi = int(x.min()), int(x.max())
    return torch.randint(lo, hi + 1, x.shape, generator=gen, dtype=torch.int64).to(dtype=x.dtype, device=x.device)


def _tensors(out: Any) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    for name in ("logits", "last_hidden_state", "loss"):
        if hasattr(out, name):
            return _tensors(getattr(out, name))
    return []


def _model_dtype(model) -> str:
    import torch

    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    for p in model.parameters():
        if p.is_floating_point():
            return names.get(p.dtype, "fp32")
    return "fp32"


def _site_breakdown(original, patched, inputs: list, device: str, kinds: list[str], kernel_patch,
                    turns: int | None = None) -> list[dict]:
    """Time spent in the swapped modules before and after the swap, and in the rest of the forward.

    The two models take turns, one forward each, in alternating order (ABBA...), and each part's time is
    the mean over the turns: on the H100 the GPU's speed drifted ~12% over a run (power, heat), and
    timing one model after the other put that drift into "the rest of the forward got slower".
    Empty when no module was swapped (functional kernels have no module to time: they count in the rest)."""
    sites = kernel_patch.module_sites(original, kinds)
    if not sites:
        return []
    turns = turns or (SITE_TURNS if device == "cuda" else 1)
    models = (original, patched)
    timers = [SiteTimer(model, sites, device) for model in models]
    sums: list[dict[str, float]] = [{}, {}]
    try:
        if device == "cuda":
            for model in models:
                model(*inputs)  # hooks in place: one untimed call each (event pools, allocator)
        for turn in range(turns):
            order = (0, 1) if turn % 2 == 0 else (1, 0)
            for i in order:
                for label, ms in timers[i].measure(lambda: models[i](*inputs), 1).items():
                    sums[i][label] = sums[i].get(label, 0.0) + ms
    finally:
        for timer in timers:
            timer.close()
    rows = site_breakdown(*({k: v / turns for k, v in s.items()} for s in sums))
    rows[-1]["includes"] = [k for k in kinds if k in kernel_patch.FUNCTION_KINDS]  # timed within "rest"
    return rows


def run_request(request: dict) -> dict:
    """Everything the subprocess does; returns the IntegrationResult fields."""
    device = request["device"]
    from .devices import use_triton_interpreter

    use_triton_interpreter(device)  # before any kernel is imported
    if request.get("mode") == "kernelbench":
        from .model_new import check_model_new

        return check_model_new(request)
    import copy

    import torch

    from autokernel.kernels import get_spec
    from autokernel.kernels.spec import DTYPE_NAMES

    from . import kernel_patch
    from .model_loading import load_model

    loaded = load_model(request["model_path"], device, size=request.get("size"))
    original = loaded.model.eval()
    inputs = list(loaded.inputs) if isinstance(loaded.inputs, (list, tuple)) else [loaded.inputs]
    patched = copy.deepcopy(original)
    table, kinds = {}, []
    for k in request["kernels"]:
        try:
            spec_tol = get_spec(k["kind"]).tolerances
        except Exception:  # no spec in this build: the patcher's default tolerances
            spec_tol = {}
        tolerances = {DTYPE_NAMES[d]: list(v) for d, v in spec_tol.items() if d in DTYPE_NAMES}
        fn = _load_kernel(k["path"], k["kind"])
        table[k["kind"]] = kernel_patch.KernelEntry(k["kind"], fn, tolerances=tolerances)
        kinds.append(k["kind"])
    stats = kernel_patch.patch(patched, table)
    dtype = _model_dtype(original)
    atol, rtol = MODEL_TOLERANCE.get(dtype, MODEL_TOLERANCE["fp32"])
    gen = torch.Generator().manual_seed(1234)
    max_err, correct, details = 0.0, True, []
    with torch.no_grad():
        for trial in range(int(request.get("trials", 3))):
            args = inputs if trial == 0 else [_fresh_like(x, gen) for x in inputs]
            err, problems = _compare(_tensors(original(*args)), _tensors(patched(*args)), atol, rtol, f"trial {trial}")
            max_err, correct, details = max(max_err, err), correct and not problems, details + problems
        replaced = stats.as_list(kinds)
        for item in replaced:
            item["candidate_id"] = next((k.get("candidate_id") for k in request["kernels"] if k["kind"] == item["kind"]), None)
        used = [r["kind"] for r in replaced if r["calls"]]
        meaningful = device == "cuda"

        fns = {"eager": lambda: original(*inputs), "patched": lambda: patched(*inputs)}
        if request.get("compile", True):
            for name, model in (("compile", copy.deepcopy(original)), ("patched_compile", patched)):
                fn = compiled_forward(model, inputs, details, device, label=FORWARDS[name])
                if fn is not None:
                    fns[name] = fn
        if "patched_compile" in fns:  # what we would recommend must compute what the model does
            err, problems = _compare(_tensors(original(*inputs)), _tensors(fns["patched_compile"]()), atol, rtol,
                                     FORWARDS["patched_compile"])
            max_err, correct, details = max(max_err, err), correct and not problems, details + problems
        times = time_interleaved({FORWARDS[n]: f for n, f in fns.items()}, device,
                                 rounds=TIMING_ROUNDS if meaningful else 1)
        times = {n: times[FORWARDS[n]] for n in fns}
        ms = {n: t.ms for n, t in times.items()}
        eager_ms, model_ms = ms["eager"], ms["patched"]
        compile_ms, patched_compile_ms = ms.get("compile"), ms.get("patched_compile")
        spread = max(t.spread for t in times.values()) if meaningful else None
        pairs = {"eager": ("eager", "patched"), "compile": ("compile", "patched"),
                 "patched_compile": ("compile", "patched_compile")}
        per_round = {key: round_speedups(times[a], times[b]) for key, (a, b) in pairs.items()
                     if a in times and b in times} if meaningful else {}
        recommended = min((n for n in ms if correct or not n.startswith("patched")), key=ms.__getitem__)
        sites = _site_breakdown(original, patched, inputs, device, used, kernel_patch)
    summary = (f"outputs within {atol} + {rtol} x max|ref| ({dtype}) on {int(request.get('trials', 3))} inputs"
               if correct else "outputs differ")
    summary += f"; kernels used: {', '.join(used) if used else 'none (no call matched a kept kernel)'}"
    mismatched = [f"{r['kind']}: {m}" for r in replaced for m in r["mismatches"]]
    if mismatched:
        summary += "; fell back to PyTorch where a kernel disagreed: " + "; ".join(mismatched[:3])
    summary += "; " + forwards_text(ms, recommended, meaningful)
    if spread is not None:
        summary += f"; timed in {TIMING_ROUNDS} interleaved rounds (round medians spread {spread:.1%}"
        ranges = [f"{min(r):.2f}-{max(r):.2f}x {ROUND_LABELS[key]}" for key, r in per_round.items() if r]
        summary += f"; round by round: {', '.join(ranges)})" if ranges else ")"
    if sites:
        summary += "; " + breakdown_text(sites)
    if not meaningful:
        summary += "; CPU timings under Triton's interpreter are not meaningful"
    return {
        "replaced": replaced, "correct": correct, "max_abs_error": max_err,
        "detail": "; ".join([summary] + details),
        "model_ms": model_ms, "eager_ms": eager_ms, "compile_ms": compile_ms,
        "speedup_eager": eager_ms / model_ms if model_ms else 0.0,
        "speedup_compile": (compile_ms / model_ms) if compile_ms and model_ms else None,
        "meaningful": meaningful, "spread": spread, "sites": sites, "round_speedups": per_round,
        "patched_compile_ms": patched_compile_ms, "recommended": recommended,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m autokernel.engine.integrate REQUEST.json", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text())
    try:
        result = run_request(request)
    except Exception as e:
        import traceback

        traceback.print_exc()
        result = {"replaced": [{"kind": k["kind"], "candidate_id": k.get("candidate_id")} for k in request["kernels"]],
                  "correct": False, "detail": f"integration failed: {type(e).__name__}: {e}",
                  "meaningful": request["device"] == "cuda"}
    print(RESULT_PREFIX + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
