"""Put the kept kernels back into the user's model, prove it still computes the same, time it.

The engine process never imports a kernel, so integration runs in a subprocess
(`python -m autokernel.engine.integrate REQUEST.json`) that sets up Triton's interpreter on CPU
first, loads the model, patches a copy with `kernel_patch.patch`, compares the patched model's
outputs with the untouched original on several fresh inputs, and times four forwards end to end in
interleaved rounds: eager, torch.compile, patched, patched + torch.compile (the kernels are custom
operators Inductor compiles around; its outputs are checked too), recommending the fastest correct
one. A compile that fails (an odd model, no C++ compiler on the CPU) is reported and left out.
A kernel that wins alone can lose in the model (under torch.compile it cuts a fusion), so each patched
forward uses the best subset of the kept kinds found by `kernel_selection.LeaveOneOut` (greedy
leave-one-out, every subset timed in the same rounds as the baselines and its outputs checked); the
chosen kinds are in each `replaced` item's `chosen` (the forwards that use it), every subset measured in
`selection.json` beside the request, progress lines in `progress.log`.
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

from .engine_watch import PIPE_ENV, end_with_the_engine, kill_group
from .events import IntegrationResult
from .forward_timing import (SiteTimer, breakdown_text, compiled_forward, round_speedups, site_breakdown,
                             time_interleaved)
from .kernel_selection import LeaveOneOut, describe
from .model_new import check_model_new, write_model_new
from .outputs import tensors
from .sandbox import child_env, confine_process

# Model-level tolerance per dtype, relative to the output's largest magnitude: kernels that each pass
# their own check still round differently, and the differences add up through the layers.
MODEL_TOLERANCE = {"fp32": (1e-3, 1e-2), "fp16": (1e-2, 2e-2), "bf16": (2e-2, 5e-2)}
RESULT_PREFIX = "AUTOKERNEL_INTEGRATION "
INTEGRATION_MODES = ("model", "kernelbench")
# Fresh inputs the outputs are compared on, per mode and device (the interpreter makes CPU trials slow).
TRIALS = {"model": {"cuda": 3, "cpu": 2}, "kernelbench": {"cuda": 5, "cpu": 3}}
TRIALS_ENV = "AUTOKERNEL_INTEGRATION_TRIALS"
# Interleaved rounds of the forwards on a GPU (forward_timing.time_interleaved); the request carries the
# rounds to the child, one on the CPU, where a forward under the interpreter is slow and its time means nothing.
TIMING_ROUNDS = 5
SITE_TURNS = 8  # forwards of each model, taking turns, behind the per-site breakdown on a GPU
# The share of the integration's time limit the kernel-subset search may spend (kernel_selection.py): its
# compiles are the cost, and the rest (loading, checks, the breakdown) must still fit.
SELECTION_SHARE = 0.5


# -- parent side ---------------------------------------------------------------------------------------
def default_trials(mode: str, device: str) -> int:
    """Fresh inputs a check compares on when the caller names none: `TRIALS`, unless $AUTOKERNEL_INTEGRATION_TRIALS
    (a positive whole number) says otherwise, so an end-to-end test on the interpreter can check on one input
    where each patched forward takes seconds."""
    value = os.environ.get(TRIALS_ENV, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return TRIALS[mode]["cuda" if device == "cuda" else "cpu"]


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
               "trials": trials or default_trials(mode, device), "compile": compile,
               "timing_rounds": TIMING_ROUNDS if device == "cuda" else 1,
               "selection_budget_s": SELECTION_SHARE * timeout_s, "progress_path": str(workdir / "progress.log"),
               "selection_path": str(workdir / "selection.json")}
    if mode == "kernelbench":
        request["model_new"] = str(write_model_new(workdir, model_path, entries))
    req_path = workdir / "request.json"
    req_path.write_text(json.dumps(request, indent=2))
    # The child runs kept (and, for KernelBench, LLM-written) code: it starts as a worker does, with no
    # credentials, and confines itself first thing (`main`).
    env = child_env(readable=[workdir, model_path], writable=[workdir])
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    # The child leads a process group of its own (with what it starts: Inductor's compile workers) and watches a
    # pipe whose other end only this process holds, so it ends with the engine however the engine ends
    # (engine/engine_watch.py): an orphaned integration would hold the device from the resumed session's.
    watch_read, watch_write = os.pipe()
    env[PIPE_ENV] = str(watch_read)
    started = time.monotonic()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "autokernel.engine.integrate", str(req_path)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, start_new_session=True, pass_fds=(watch_read,))
    finally:
        os.close(watch_read)
    try:
        deadline = started + timeout_s
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                stopped = should_stop is not None and should_stop()
                if stopped or time.monotonic() > deadline:
                    kill_group(proc)
                    proc.communicate()
                    if stopped:
                        return None
                    return IntegrationResult(replaced=entries, correct=False, meaningful=device == "cuda",
                                             detail=f"integration timed out after {timeout_s:.0f} s")
    finally:
        os.close(watch_write)
    proc.stdout, proc.stderr = stdout, stderr
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            data = json.loads(line[len(RESULT_PREFIX):])
            if data.get("phase_seconds"):  # the child's own phases; the rest is its start (imports, CUDA) and exit
                phases = data["phase_seconds"]
                phases["process"] = round(max(0.0, time.monotonic() - started - sum(phases.values())), 2)
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


def _load_kernel(path: str, name: str, device: str):
    import importlib.util

    from .check_tuning import on_the_interpreter

    spec = importlib.util.spec_from_file_location(f"autokernel_integrated_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    on_the_interpreter(module, device)  # an autotuned kernel, checked on the interpreter, runs there too
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
    rows[-1]["includes"] = [k for k in kinds if k in kernel_patch.function_kinds()]  # timed within "rest"
    return rows


def _progress_writer(path: str | None) -> Callable[[str], None]:
    """Progress lines of the subset search, to stderr and (for a caller that reads them as they come,
    e.g. scripts/four_forwards.py) appended to `path`."""
    if path:
        Path(path).write_text("")  # this run's lines only
    def progress(line: str) -> None:
        print(f"[integration] {line}", file=sys.stderr, flush=True)
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")
    return progress


def _allow_recompiles(n_kinds: int) -> None:
    """Every subset's patched copy is one more compile of the model's code: raise Dynamo's recompile limit
    so none falls back to eager unseen, and make hitting it an error (that subset failed) not a silence."""
    import torch._dynamo

    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, name, max(getattr(cfg, name), 8 + 4 * (n_kinds + 1)))
    if hasattr(cfg, "fail_on_recompile_limit_hit"):
        cfg.fail_on_recompile_limit_hit = True


class _SubsetForwards:
    """The patched forwards of kernel-kind subsets, built when first asked for: a copy of the model that
    shares its weights, patched with the subset's kernels, compiled for `patched_compile`; each forward's
    outputs checked once against the original's (one that differs, or fails to compile, is None)."""

    def __init__(self, original, table: dict, inputs: list, device: str, kernel_patch, check, notes: list[str],
                 progress: Callable[[str], None]):
        self.original, self.table, self.inputs, self.device = original, table, inputs, device
        self.kernel_patch, self.check, self.notes, self.progress = kernel_patch, check, notes, progress
        self.models: dict[tuple, Any] = {}
        self.fns: dict[tuple, Callable[[], Any] | None] = {}
        self.errors: dict[tuple, float] = {}
        self.why: dict[tuple, str] = {}

    def model(self, kinds: tuple):
        if kinds not in self.models:
            import copy
            import itertools

            shared = {id(t): t for t in itertools.chain(self.original.parameters(), self.original.buffers())}
            model = copy.deepcopy(self.original, shared)
            self.kernel_patch.patch(model, {k: self.table[k] for k in kinds})
            self.models[kinds] = model
        return self.models[kinds]

    def forward(self, mode: str, kinds: tuple) -> tuple[Callable[[], Any] | None, float]:
        """(the forward to time or None, seconds it took to build, compile and check now: 0 if cached)."""
        key = (mode, kinds)
        if key in self.fns:
            return self.fns[key], 0.0
        t0 = time.monotonic()
        label = f"{FORWARDS[mode]} with {', '.join(kinds) or 'no kernel'}"
        model, notes = self.model(kinds), []
        if mode == "patched_compile":
            fn = compiled_forward(model, self.inputs, notes, self.device, label=label)
        else:
            fn = lambda: model(*self.inputs)  # noqa: E731
        if fn is not None:
            err, problems = self.check(fn(), label)
            self.errors[key] = err
            if problems:
                fn, notes = None, notes + problems
        self.fns[key] = fn
        seconds = time.monotonic() - t0
        self.why[key] = "; ".join(notes)
        self.notes.extend(notes)
        if mode == "patched_compile" or fn is None:
            self.progress(f"{label}: {'ready' if fn else 'failed'} in {seconds:.1f} s"
                          + (f" ({notes[0][:200]})" if notes else ""))
        return fn, seconds

    def forget(self, keep: set[tuple]) -> None:
        """Let go of the models and compiled forwards no longer needed (GPU memory), keeping `keep`."""
        for key in [k for k in self.fns if k not in keep]:
            del self.fns[key]  # the search never asks for a subset it has moved past
        for kinds in [k for k in self.models if k not in {k for _, k in keep}]:
            del self.models[kinds]


def _select(forwards: _SubsetForwards, base: dict, modes: list[str], kinds: list[str], device: str, rounds: int,
            budget_s: float) -> tuple[dict, dict]:
    """The subset search of every mode, stepped together: each step times the baselines, each mode's
    current subset and its candidates in the same interleaved rounds. Returns ({mode: LeaveOneOut},
    {forward name: ForwardTime of the last step}); the headline forwards are the chosen subsets as timed
    in that last step, so all four come from the same rounds."""
    searches = {mode: LeaveOneOut(kinds) for mode in modes}
    start, step, last = time.monotonic(), 0, {}
    while True:
        time_left = budget_s - (time.monotonic() - start)
        asked = {m: s.candidates(time_left) for m, s in searches.items()}
        if step and not any(asked.values()):
            break
        step += 1
        fns, spent, names = dict(base), {m: 0.0 for m in modes}, {}
        for mode, search in searches.items():
            for kinds_ in [search.current] + asked[mode]:
                fn, seconds = forwards.forward(mode, kinds_)
                spent[mode] += seconds if kinds_ != search.current else 0.0
                names[(mode, kinds_)] = f"{FORWARDS[mode]} [{', '.join(kinds_)}]"
                if fn is not None:
                    fns[names[(mode, kinds_)]] = fn
        if any(asked.values()):
            forwards.progress(f"subset step {step}: timing {len(fns)} forwards in {rounds} interleaved round(s); "
                              + ", ".join(f"{FORWARDS[m]}: {len(c)} subsets" for m, c in asked.items() if c)
                              + f"; {time.monotonic() - start:.0f} s of {budget_s:.0f} s spent")
        times = time_interleaved(fns, device, rounds=rounds)
        for mode, search in searches.items():
            if asked[mode]:
                measured = {k: (times[n].per_round if n in times else None) for (m, k), n in names.items() if m == mode}
                search.record(measured, spent[mode], {k: forwards.why.get((mode, k), "") for k in measured})
                forwards.progress(describe(search, FORWARDS[mode]))
        last = {n: times.get(n) for n in base}
        for mode, search in searches.items():
            last[mode] = times.get(names.get((mode, search.current), ""))
        forwards.forget({(m, s.current) for m, s in searches.items()})
    return searches, last


def _write_selection(path: str | None, searches: dict, chosen: dict, recommended: str) -> None:
    """Every subset measured, per mode, as JSON beside the request (the event keeps the chosen kinds)."""
    if not path:
        return
    data = {"recommended": recommended, "chosen": {m: list(k) for m, k in chosen.items()},
            "modes": {m: {"stopped": s.stopped, "steps": s.steps, "seconds": s.seconds,
                          "trials": [dict(vars(t), kinds=list(t.kinds)) for t in s.trials]}
                      for m, s in searches.items()}}
    Path(path).write_text(json.dumps(data, indent=2))


def run_request(request: dict) -> dict:
    """Everything the subprocess does; returns the IntegrationResult fields."""
    device = request["device"]
    from .devices import use_triton_interpreter

    use_triton_interpreter(device)  # before any kernel is imported
    if request.get("mode") == "kernelbench":
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
        fn = _load_kernel(k["path"], k["kind"], device)
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
            err, problems = _compare(tensors(original(*args)), tensors(patched(*args)), atol, rtol, f"trial {trial}")
            max_err, correct, details = max(max_err, err), correct and not problems, details + problems
        replaced = stats.as_list(kinds)
        for item in replaced:
            item["candidate_id"] = next((k.get("candidate_id") for k in request["kernels"] if k["kind"] == item["kind"]), None)
        used = [r["kind"] for r in replaced if r["calls"]]
        meaningful = device == "cuda"

        ref = tensors(original(*inputs))
        forwards = _SubsetForwards(original, {k: table[k] for k in used}, inputs, device, kernel_patch,
                                   lambda out, label: _compare(ref, tensors(out), atol, rtol, label), details,
                                   progress=_progress_writer(request.get("progress_path")))
        base = {"eager": lambda: original(*inputs)}
        modes = ["patched"]
        if request.get("compile", True):
            _allow_recompiles(len(used))
            fn = compiled_forward(copy.deepcopy(original), inputs, details, device, label=FORWARDS["compile"])
            if fn is not None:  # without a compiled baseline there is nothing to choose a compiled subset against
                base["compile"] = fn
                modes.append("patched_compile")
            else:
                details.append(f"{FORWARDS['patched_compile']} not tried: {FORWARDS['compile']} of the original failed")
        forwards.models[tuple(used)] = patched  # all kinds: the model checked on the trials above
        searches, times = _select(forwards, base, modes, used, device, int(request["timing_rounds"]),
                                  float(request.get("selection_budget_s") or 600.0))
        chosen = {mode: searches[mode].current for mode in modes}
        ms = {n: (times[n].ms if times.get(n) else None) for n in FORWARDS}
        eager_ms, model_ms = ms["eager"], ms["patched"] or 0.0
        compile_ms, patched_compile_ms = ms.get("compile"), ms.get("patched_compile")
        timed = {n: t for n, t in times.items() if t is not None}
        spread = max(t.spread for t in timed.values()) if meaningful else None
        pairs = {"eager": ("eager", "patched"), "compile": ("compile", "patched"),
                 "patched_compile": ("compile", "patched_compile")}
        per_round = {key: round_speedups(timed[a], timed[b]) for key, (a, b) in pairs.items()
                     if a in timed and b in timed} if meaningful else {}
        ms = {n: v for n, v in ms.items() if v is not None}
        recommended = min((n for n in ms if correct or not n.startswith("patched")), key=ms.__getitem__)
        for item in replaced:
            item["chosen"] = [mode for mode in modes if item["kind"] in chosen[mode]]
        max_err = max([max_err] + [forwards.errors.get((m, chosen[m]), 0.0) for m in modes])
        _write_selection(request.get("selection_path"), searches, chosen, recommended)
        sites = _site_breakdown(original, patched, inputs, device, used, kernel_patch)
    summary = (f"outputs within {atol} + {rtol} x max|ref| ({dtype}) on {int(request.get('trials', 3))} inputs"
               if correct else "outputs differ")
    summary += f"; kernels used: {', '.join(used) if used else 'none (no call matched a kept kernel)'}"
    mismatched = [f"{r['kind']}: {m}" for r in replaced for m in r["mismatches"]]
    if mismatched:
        summary += "; fell back to PyTorch where a kernel disagreed: " + "; ".join(mismatched[:3])
    summary += "; " + forwards_text(ms, recommended, meaningful)
    if len(used) > 1:
        summary += "; " + "; ".join(describe(searches[m], FORWARDS[m]) for m in searches)
    if spread is not None:
        summary += f"; timed in {request['timing_rounds']} interleaved rounds (round medians spread {spread:.1%}"
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
    confine_process(request["device"])  # one thread yet, and nothing of torch imported
    if os.environ.get(PIPE_ENV, "").isdigit():
        end_with_the_engine(int(os.environ[PIPE_ENV]))
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
