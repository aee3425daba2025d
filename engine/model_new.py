"""A KernelBench solution: `ModelNew`, the problem's `Model` with the kept kernels swapped in.

Parent side, `write_model_new`: one self-contained `model_new.py` (needs torch and triton, imports no
autokernel, looks up no file) that KernelBench's loaders and static check accept and a user runs the
KernelBench way: `ModelNew(*get_init_inputs())(*get_inputs())`. For kept kernels it holds the problem's
code, `kernel_patch.py` and each kernel's source (the shared Triton helpers it imports written in, a CUDA
one's `.cu` text built by `load_inline`); for a whole-problem candidate (target `problem`,
`engine/problem_spec.py`), that candidate's code and the problem's. The kernel files beside it are the integration's record, never loaded by it.

Child side, `check_model_new` (run by the integration subprocess in mode `kernelbench`): imports that
same file and checks it the way KernelBench does: `Model` and `ModelNew` built from the same seed,
several trials of fresh `get_inputs()`, every output within atol = rtol = 1e-2 elementwise (like
`torch.allclose`; a Model that returns several tensors has each compared, named by position); then
times `ModelNew` against `Model` in eager mode and under torch.compile. The file's text is held to
KernelBench's static rules too (`engine/static_check.py`): a file it would reject is not correct.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

from .outputs import chunks, tensors
from .problem_spec import (PROBLEM_TARGET, SEED, AutogradOnlyFailure, build_seeded, call_autograd_first,
                           defines_problem, kernelbench_tolerance)

MODEL_NEW_FILE = "model_new.py"
CHECK_DONE = "KernelBench check:"  # how the detail of a check that ran to the end begins

# Set before any @triton.jit runs: without a GPU, Triton's kernels run under its interpreter.
_PREAMBLE = """import os
import torch
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
"""

# KernelBench's static check reads these docstrings too: no "p-a-s-s" and no "except <word>" in them.
_KERNELS_DOC = """ModelNew for the KernelBench problem {problem_name}: its Model with the kernels autokernel kept.

Written by `autokernel kernelbench`; the score was measured from this very file, and it needs nothing
beside it: the problem's code, each kept kernel ({kernels}) and the patch that routes Model's calls to
them are all here. Use it the KernelBench way: `ModelNew(*get_init_inputs())(*get_inputs())`. Needs torch
and triton; without a CUDA GPU the Triton kernels run under Triton's interpreter.{note}
"""
_WHOLE_DOC = """ModelNew for the KernelBench problem {problem_name}: the whole forward rewritten ({candidate}).

Written by `autokernel kernelbench`; the score was measured from this very file, and it needs nothing
beside it. Use it the KernelBench way: `ModelNew(*get_init_inputs())(*get_inputs())` (Model, get_inputs
and get_init_inputs are the problem's own). Needs torch and triton; without a CUDA GPU the Triton kernels
run under Triton's interpreter.
"""
_MODEL_NEW = '''

class ModelNew(Model):
    """The problem's Model; each call that matches a kept kernel's contract runs that kernel instead."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kernel_stats = {patch}(self, {table}, verify=False)
'''


# -- parent side ---------------------------------------------------------------------------------------
def write_model_new(workdir: Path, problem_path: str | Path, entries: list[dict]) -> Path:
    """Write the self-contained `model_new.py` into `workdir` from the problem file and the kernel files
    `entries` name ([{kind, candidate_id, path}]); returns its path.

    For kept kernels, the file is the problem's code, `kernel_patch.py` and each kernel's source
    (`engine/standalone.py` keeps their names apart) and a `ModelNew(Model)` that patches itself in
    `__init__`. The kernels run without the patch's first-call check (`verify=False`): a kernel that
    disagrees makes ModelNew wrong rather than quietly falling back to PyTorch, as KernelBench requires.
    """
    from autokernel.kernels import patch_source

    from .standalone import Part, combine

    workdir = Path(workdir)
    problem = Path(problem_path).resolve()
    whole = [e for e in entries if e["kind"] == PROBLEM_TARGET]
    if whole:
        return _write_whole(workdir, problem, whole[0])
    patch_part = Part("kernel_patch.py", patch_source([e["kind"] for e in entries]), prefix="patch_", strip_try=True,
                      future=False)  # it has no annotation the future import would change
    kernel_parts = [Part(f"{e['kind']}.py", kernel_source(e), prefix=f"{e['kind']}_", rename=("kernel_fn",))
                    for e in entries]
    parts = [Part(problem.name, problem.read_text(errors="replace")), patch_part, *kernel_parts]
    futures, texts = combine(parts)
    kinds = [e["kind"] for e in entries]
    note = "" if entries else "\n\nNo kernel was kept for this problem, so ModelNew is the problem's Model unchanged."
    doc = _KERNELS_DOC.format(problem_name=problem.stem, kernels=", ".join(
        f"{e['kind']} {e.get('candidate_id') or ''}".strip() for e in entries) or "none", note=note)
    sections = [f"# ---- the problem {problem.name} (docstrings and comments left out) ----\n{texts[0]}",
                "# ---- autokernel's kernel_patch.py: routes Model's calls to the kernels ----\n"
                "# (the first-call check's exception handling is left out: ModelNew runs with verify=False)\n"
                + texts[1]]
    sections += [f"# ---- kernel {k}: candidate {e.get('candidate_id')} ----\n{t}"
                 for k, e, t in zip(kinds, entries, texts[2:])]
    entry = patch_part.names["KernelEntry"]
    table = "{" + ", ".join(f"{k!r}: {entry}({k!r}, {p.names['kernel_fn']})"
                            for k, p in zip(kinds, kernel_parts)) + "}"
    body = "\n\n\n".join(sections) + _MODEL_NEW.format(patch=patch_part.names["patch"], table=table)
    return _write(workdir, doc, futures, body)


def _write(workdir: Path, doc: str, futures: list[str], body: str) -> Path:
    future = f"from __future__ import {', '.join(futures)}\n" if futures else ""
    path = workdir / MODEL_NEW_FILE
    path.write_text(f'"""{doc}"""\n{future}\n{_PREAMBLE}\n\n{body}')
    return path


def kernel_source(entry: dict) -> str:
    """A kept kernel's source as the standalone file holds it: the shared Triton helpers it imports written
    in (engine/standalone.py), a CUDA candidate's `.cu` files strings built with
    `torch.utils.cpp_extension.load_inline` (engine/cuda_inline.py)."""
    from .cuda_inline import inline_cuda, uses_cuda_build
    from .standalone import inline_triton_common

    source = inline_triton_common(Path(entry["path"]).read_text())
    return inline_cuda(source, entry["path"]) if uses_cuda_build(source) else source


def _write_whole(workdir: Path, problem: Path, entry: dict) -> Path:
    """`model_new.py` = a whole-problem candidate's own code, then the problem's unless the candidate
    carries it (as an Inductor seed does): one file, no path loaded."""
    from .standalone import Part, combine, inline_triton_common

    source = inline_triton_common(Path(entry["path"]).read_text())
    parts = [Part(Path(entry["path"]).name, source)]
    if not defines_problem(source):
        parts.append(Part(problem.name, problem.read_text(errors="replace")))
    futures, texts = combine(parts)
    candidate = entry.get("candidate_id") or "candidate"
    body = f"# ---- the candidate {candidate} (docstrings and comments left out) ----\n{texts[0]}"
    if len(texts) > 1:
        body += f"\n\n\n# ---- the problem {problem.name} (docstrings and comments left out) ----\n{texts[1]}\n"
    return _write(workdir, _WHOLE_DOC.format(problem_name=problem.stem, candidate=candidate), futures, body)


# -- child side ----------------------------------------------------------------------------------------
def _import_model_new(path: str):
    spec = importlib.util.spec_from_file_location("autokernel_model_new", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _error_and_close(o, r) -> tuple[float, bool]:
    """The largest finite |o - r| and whether allclose holds, a chunk at a time (`outputs.chunks`): float64
    copies of a whole multi-GB output would not fit beside it on the device."""
    import torch

    tol = kernelbench_tolerance(r.dtype)
    worst, close, flat_out = 0.0, True, o.detach().reshape(-1)
    for start, b in chunks(r):
        a = flat_out[start:start + b.numel()]
        diff = (a.double() - b.double()).abs()
        diff = diff[torch.isfinite(diff)]  # NaN or Inf where the other has a number: allclose says no
        if diff.numel():
            worst = max(worst, float(diff.max()))
        close = close and bool(torch.allclose(a, b, atol=tol, rtol=tol))
    return worst, close


def _compare(ref: list, out: list) -> tuple[bool, float, str]:
    """KernelBench's test on one trial's outputs: same count, shapes and dtypes, allclose elementwise,
    output by output (named by position when Model returns several)."""
    if len(ref) != len(out) or not ref:
        return False, 0.0, f"ModelNew returned {len(out)} tensors, Model {len(ref)}"
    worst = 0.0
    for i, (r, o) in enumerate(zip(ref, out)):
        name = f"output {i}" if len(ref) > 1 else "output"
        if r.shape != o.shape or r.dtype != o.dtype:
            return False, worst, f"{name} {tuple(o.shape)} {o.dtype}, expected {tuple(r.shape)} {r.dtype}"
        err, close = _error_and_close(o, r)
        worst = max(worst, err)
        if not close:
            differ = f"{name} differs" if len(ref) > 1 else "outputs differ"
            return False, worst, f"{differ}: max abs error {err:.3g} (atol = rtol = {kernelbench_tolerance(r.dtype):g})"
    return True, worst, ""


def check_model_new(request: dict) -> dict:
    """The KernelBench check and timing of `request["model_new"]`; returns IntegrationResult fields.

    Running out of memory anywhere in it (Model, ModelNew or the timing) is the machine's limit, not a
    wrong ModelNew: the detail is then the "does not fit" verdict alone, with no trial counted."""
    from .fit import no_fit

    try:
        return _check(request)
    except Exception as e:
        fit = no_fit(e, request["device"])
        if not fit:
            raise
        return {"replaced": [], "correct": False, "max_abs_error": 0.0, "detail": fit,
                "model_ms": 0.0, "eager_ms": 0.0, "compile_ms": None, "speedup_eager": 0.0,
                "speedup_compile": None, "meaningful": request["device"] == "cuda"}


def _check(request: dict) -> dict:
    device = request["device"]
    from .fit import no_fit
    import torch

    from .forward_timing import compiled_forward, time_interleaved
    from .model_loading import SIZE_ENV, _move, default_size

    os.environ[SIZE_ENV] = request.get("size") or default_size(device)  # the size the session profiled
    phases = _Phases()
    module = _import_model_new(request["model_new"])
    init = list(getattr(module, "get_init_inputs", lambda: [])())

    # the same seed: Model and ModelNew start from the same weights
    model, model_new = build_seeded(module.Model, init, device), build_seeded(module.ModelNew, init, device)
    phases.mark("load")
    trials = int(request.get("trials") or 3)
    passed, max_err, problems = 0, 0.0, []
    with torch.no_grad():
        for trial in range(trials):
            torch.manual_seed(SEED + 1 + trial)
            inputs = None  # two trials' tensors never coexist: a problem at its real size fills the device
            inputs = _move(list(module.get_inputs()), device, None)
            ref = tensors(model(*inputs))
            try:  # the first trial with autograd on, as a user's script and KernelBench's timing call ModelNew
                out = call_autograd_first(model_new, inputs) if trial == 0 else model_new(*inputs)
                ok, err, why = _compare(ref, tensors(out))
            except Exception as e:  # ModelNew's own failure is an incorrect solution, not a failed check
                if no_fit(e, device):  # ... unless it is out of memory: check_model_new says so
                    raise
                ok, err, why = False, 0.0, (f"ModelNew raised {type(e).__name__}: {e}"
                                            + (" (with autograd on)" if isinstance(e, AutogradOnlyFailure) else ""))
            out = None
            del ref
            max_err = max(max_err, err)
            passed += ok
            if not ok:
                problems.append(f"trial {trial}: {why}")
        phases.mark("trials")
        fns = {"eager": lambda: model(*inputs)}
        try:
            model_new(*inputs)
            fns["model_new"] = lambda: model_new(*inputs)
        except Exception as e:
            if no_fit(e, device):
                raise
            problems.append(f"timing ModelNew raised {type(e).__name__}: {e}")
        # on the CPU compiling takes longer than the whole check, and means nothing
        compiled = compiled_forward(model, inputs, problems) if device == "cuda" else None
        if compiled is not None:
            fns["compile"] = compiled
        phases.mark("compile")
        try:  # interleaved rounds, as the model integration times (forward_timing.time_interleaved)
            times = time_interleaved(fns, device, rounds=request["timing_rounds"])
        except Exception as e:
            if no_fit(e, device):
                raise
            problems.append(f"timing raised {type(e).__name__}: {e}")
            times = {}
        eager_ms = times["eager"].ms if "eager" in times else 0.0
        model_ms = times["model_new"].ms if "model_new" in times else 0.0
        compile_ms = times["compile"].ms if "compile" in times else None
        phases.mark("timing")
    return {**_result(request, model_new, passed, trials, max_err, problems, eager_ms, model_ms, compile_ms,
                      _static(request)), "phase_seconds": phases.seconds}


class _Phases:
    """Seconds between marks: where a check's time goes (loading and building, the trials, torch.compile, the
    timing), recorded with its result."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = round(now - self._last, 2)
        self._last = now


def _static(request: dict) -> list[str]:
    """KernelBench's static rules on the file (engine/static_check.py): the general ones always, each kept
    kernel's backend's too (a ModelNew with no kernel is the Model itself: it has no kernel to show)."""
    from .static_check import static_problems

    backends = sorted({k.get("backend") or "triton" for k in request["kernels"]})
    return static_problems(Path(request["model_new"]).read_text(), backends)


def _result(request: dict, model_new: Any, passed: int, trials: int, max_err: float, problems: list[str],
            eager_ms: float, model_ms: float, compile_ms: float | None, static: list[str] = ()) -> dict:
    kinds = [k["kind"] for k in request["kernels"]]
    stats = getattr(model_new, "kernel_stats", None)
    replaced = stats.as_list(kinds) if stats is not None else []
    if kinds == [PROBLEM_TARGET]:  # the whole ModelNew is the kept candidate: every trial ran it
        replaced = [{"kind": PROBLEM_TARGET, "modules": 1, "calls": trials, "fallbacks": 0, "mismatches": []}]
    for item in replaced:
        item["candidate_id"] = next((k.get("candidate_id") for k in request["kernels"] if k["kind"] == item["kind"]), None)
    used = [r["kind"] for r in replaced if r["calls"]]
    meaningful = request["device"] == "cuda"
    correct = passed == trials and not static
    parts = [f"{CHECK_DONE} {passed}/{trials} trials of fresh get_inputs() within KernelBench's atol = rtol "
             "(1e-4 for float32 outputs, 1e-2 for half ones)",
             f"ModelNew: {request['model_new']}"]
    if not kinds:
        parts.append("no kept kernel: ModelNew is the problem's Model unchanged")
    else:
        parts.append(f"kernels used: {', '.join(used) if used else 'none (no call matched a kept kernel)'}")
    mismatched = [f"{r['kind']}: {m}" for r in replaced for m in r["mismatches"]]
    if mismatched:
        parts.append("fell back to PyTorch where a kernel disagreed: " + "; ".join(mismatched[:3]))
    if static:
        parts.append("KernelBench's static check rejects the file: " + "; ".join(static))
    if not meaningful:
        parts.append("CPU timings under Triton's interpreter are not meaningful; torch.compile not timed")
    return {
        "replaced": replaced, "correct": correct, "max_abs_error": max_err,
        "detail": "; ".join(parts + problems),
        "model_ms": model_ms, "eager_ms": eager_ms, "compile_ms": compile_ms,
        "speedup_eager": eager_ms / model_ms if model_ms else 0.0,
        "speedup_compile": (compile_ms / model_ms) if compile_ms and model_ms else None,
        "meaningful": meaningful,
    }
