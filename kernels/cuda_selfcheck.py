"""Build every CUDA C++ starter on this GPU and check it against its spec's reference, one line each.

Run on a GPU machine before a full harness run:

    python -m autokernel.kernels.cuda_selfcheck                 # all kernel types with a spec
    python -m autokernel.kernels.cuda_selfcheck -k softmax,matmul --dtypes bf16
    python -m autokernel.kernels.cuda_selfcheck --bench         # also time CUDA vs Triton vs eager

The builds run first, in parallel processes (`--jobs`), and land in torch's extension cache, so the
harness later loads them without compiling. The check covers the spec's smoke shape, its edge
shapes and a few sweep shapes in every dtype, compared in float64 with the spec's tolerance, and
runs each case twice to report whether the output is bitwise reproducible, and fails a starter that
changes its inputs. Judged as the harness judges (float64 reference, per-dtype tolerance). Kernel
types whose spec or CUDA starter is missing are reported as skipped. This is a quick pre-flight
check, not the harness: it does not poison outputs or look for forbidden ops or side streams
(tests/test_cuda_starters_gpu.py adds every input regime and non-contiguous inputs).
Exit status: 0 when every present starter passed, 1 otherwise, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from . import KERNEL_NAMES, get_spec
from .spec import DTYPES, DTYPE_NAMES, KernelSpec, noncontiguous_like

KERNELS_DIR = Path(__file__).resolve().parent
MAX_CHECK_ELEMENTS = 1 << 26  # keeps the whole check to a minute or so on one GPU
MAX_SWEEP_SHAPES = 3


@dataclass
class Outcome:
    name: str
    status: str  # "ok", "FAIL", "skip"
    detail: str


def starter_path(name: str) -> Path:
    return KERNELS_DIR / name / "starter_cuda.py"


def import_file(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_one(name: str) -> tuple[str, float, str]:
    """In a child process: import the starter and build its extension. -> (name, seconds, error)."""
    started = time.perf_counter()
    try:
        from .cuda_build import load_cuda_extension

        module = import_file(starter_path(name), f"ak_selfcheck_build_{name}")
        load_cuda_extension(module.SOURCE)
        return name, time.perf_counter() - started, ""
    except Exception as e:  # reported per kernel; one broken source must not hide the others
        return name, time.perf_counter() - started, f"{type(e).__name__}: {first_error_line(str(e))}"


def first_error_line(text: str) -> str:
    """The compiler's first "error" line from a failed build's output (its last line says only that it stopped)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for line in lines:
        if "error" in line.lower() and not line.lower().startswith("error building extension"):
            return line[:300]
    return lines[-1][:300] if lines else "(no message)"


def build_all(names: list[str], jobs: int) -> dict[str, tuple[float, str]]:
    """Build the extensions in `jobs` spawned processes (each build is a separate ninja project)."""
    if jobs <= 1 or len(names) <= 1:
        return {n: (secs, err) for n, secs, err in map(_build_one, names)}
    # By its importable name, so spawned children find it even when this file runs as __main__.
    from autokernel.kernels.cuda_selfcheck import _build_one as build_one

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return {n: (secs, err) for n, secs, err in pool.map(build_one, names)}


def check_shapes(spec: KernelSpec) -> list[dict]:
    """Smoke, edges and the first few sweep shapes small enough to check quickly."""
    shapes = [dict(spec.smoke_shape), *map(dict, spec.edge_shapes)]
    sweep = [dict(s) for s in spec.sweep_shapes if spec.elements(s) <= MAX_CHECK_ELEMENTS]
    for s in sweep[:MAX_SWEEP_SHAPES] + sweep[-1:]:
        if s not in shapes:
            shapes.append(s)
    return shapes


def compare(out, ref, atol: float, rtol: float, want_dtype: torch.dtype | None = None) -> tuple[bool, float, str]:
    """(within tolerance, max abs error, problem) in float64, as the harness judges: equal infinities
    and NaN pairs match; `want_dtype` is the reference's own output dtype (ref may be float64)."""
    if not isinstance(out, torch.Tensor):
        return False, float("nan"), f"returned {type(out).__name__}, not a tensor"
    if out.shape != ref.shape:
        return False, float("nan"), f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    want = ref.dtype if want_dtype is None else want_dtype
    if out.dtype != want:
        return False, float("nan"), f"dtype {out.dtype} != {want}"
    o, r = out.double(), ref.double()
    same = (o == r) | (torch.isnan(o) & torch.isnan(r))
    err = (o - r).abs().masked_fill(same, 0.0)
    ok = bool(((err <= atol + rtol * r.abs()) | same).all()) if o.numel() else True
    max_err = float(err.max()) if o.numel() else 0.0
    return ok, max_err, "" if ok else "outside tolerance"


_REFERENCE_DTYPES: dict[tuple[str, torch.dtype], torch.dtype] = {}


def reference_dtype(spec: KernelSpec, dtype: torch.dtype) -> torch.dtype:
    """The dtype the reference answers in for inputs of `dtype` (a tiny CPU run, as the harness does)."""
    key = (spec.name, dtype)
    if key not in _REFERENCE_DTYPES:
        args = spec.make_inputs(spec.smoke_shape, dtype, "cpu", torch.Generator().manual_seed(0), "normal")
        _REFERENCE_DTYPES[key] = spec.reference(*args).dtype
    return _REFERENCE_DTYPES[key]


@dataclass
class CaseResult:
    ok: bool
    max_err: float
    problem: str  # "" when ok
    reproducible: bool  # a second call gave a bitwise-identical output


def run_case(spec: KernelSpec, fn, shape: dict, dtype: torch.dtype, device: str, seed: int,
             mode: str = "normal", noncontiguous: bool = False) -> CaseResult:
    """One call of `fn` (twice, for reproducibility) against the reference, inputs checked unchanged."""
    args = spec.make_inputs(shape, dtype, device, torch.Generator().manual_seed(seed), mode)
    if noncontiguous:
        args = tuple(
            noncontiguous_like(a) if i in spec.data_args and isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for i, a in enumerate(args)
        )
    before = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
    try:
        out = fn(*args)
        again = fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as e:
        text = str(e).strip()
        msg = text.splitlines()[0][:200] if text else ""
        return CaseResult(False, float("nan"), f"raised {type(e).__name__}: {msg}", False)
    for i, (arg, copy) in enumerate(zip(args, before)):
        if copy is not None and not torch.equal(arg, copy):
            return CaseResult(False, float("nan"), f"modified its input #{i}", False)
    # Judged like the harness: the reference in float64, and outside the "normal" regime the absolute
    # tolerance scales with the largest answer.
    ref = spec.reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
    atol, rtol = spec.tolerance(dtype)
    if mode != "normal" and ref.numel():
        finite = ref[torch.isfinite(ref)]
        if finite.numel():
            atol *= max(1.0, float(finite.abs().max()))
    ok, max_err, problem = compare(out, ref, atol, rtol, reference_dtype(spec, dtype))
    if not ok and problem == "outside tolerance":
        problem += f" (max abs err {max_err:.3g}, atol {atol:g}, rtol {rtol:g})"
    reproducible = isinstance(again, torch.Tensor) and torch.equal(out, again)
    return CaseResult(ok, max_err, problem, reproducible)


def check_kernel(name: str, spec: KernelSpec, fn, dtypes: list[torch.dtype], device: str = "cuda") -> Outcome:
    """Smoke, edge and some sweep shapes in each dtype, normal inputs: the first failure, or a summary."""
    passed = total = 0
    worst = 0.0
    reproducible = True
    for dtype in [d for d in dtypes if d in spec.dtypes]:
        atol, _ = spec.tolerance(dtype)
        for shape in check_shapes(spec):
            total += 1
            result = run_case(spec, fn, shape, dtype, device, seed=1234 + total)
            if not result.ok:
                return Outcome(name, "FAIL", f"{DTYPE_NAMES[dtype]} {shape}: {result.problem}")
            reproducible = reproducible and result.reproducible
            worst = max(worst, result.max_err / max(atol, 1e-30))
            passed += 1
    repro = "bitwise reproducible" if reproducible else "NOT bitwise reproducible"
    return Outcome(name, "ok", f"{passed}/{total} cases, worst error {worst:.2f} x atol, {repro}")


def bench_line(name: str, spec: KernelSpec, cuda_fn, dtype: torch.dtype) -> str:
    """Median time of CUDA starter, Triton starter (if present) and the eager reference, first bench shape."""
    from triton.testing import do_bench

    shape = dict(spec.bench_shapes[0])
    args = spec.make_inputs(shape, dtype, "cuda", torch.Generator().manual_seed(7), "normal")
    parts = []
    contenders = [("cuda", cuda_fn)]
    triton_path = KERNELS_DIR / name / "starter_triton.py"
    if triton_path.is_file():
        try:
            contenders.append(("triton", import_file(triton_path, f"ak_selfcheck_triton_{name}").kernel_fn))
        except Exception as e:
            parts.append(f"triton import failed: {type(e).__name__}")
    contenders.append(("eager", spec.reference))
    times = {}
    for label, fn in contenders:
        try:
            times[label] = do_bench(lambda: fn(*args), warmup=25, rep=100)
        except Exception as e:
            parts.append(f"{label} failed: {type(e).__name__}")
    for label, ms in times.items():
        work = spec.bytes_moved(shape, dtype) / ms / 1e6 if spec.metric == "GB/s" else spec.flops(shape, dtype) / ms / 1e9
        parts.append(f"{label} {ms * 1e3:.1f} us ({work:.0f} {spec.metric})")
    if "cuda" in times and "triton" in times:
        parts.append(f"cuda/triton throughput {times['triton'] / times['cuda']:.0%}")
    return f"    bench {DTYPE_NAMES[dtype]} {shape}: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autokernel.kernels.cuda_selfcheck", description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--kernels", default=",".join(KERNEL_NAMES), help="comma-separated kernel types")
    parser.add_argument("--dtypes", default="fp32,fp16,bf16", help="comma-separated: fp32, fp16, bf16")
    parser.add_argument("--jobs", type=int, default=4, help="parallel builds (default 4)")
    parser.add_argument("--build-only", action="store_true", help="only compile (fills the extension cache)")
    parser.add_argument("--bench", action="store_true", help="also time CUDA vs Triton starter vs eager (bf16)")
    opts = parser.parse_args(argv)

    if not torch.cuda.is_available():
        print("cuda_selfcheck: no CUDA GPU here (torch.cuda.is_available() is False); nothing to check")
        return 2
    names = [n.strip() for n in opts.kernels.split(",") if n.strip()]
    unknown = [n for n in names if n not in KERNEL_NAMES]
    if unknown:
        print(f"cuda_selfcheck: unknown kernel type(s) {', '.join(unknown)}; known: {', '.join(KERNEL_NAMES)}")
        return 2
    try:
        dtypes = [DTYPES[d.strip()] for d in opts.dtypes.split(",") if d.strip()]
    except KeyError as e:
        print(f"cuda_selfcheck: unknown dtype {e.args[0]!r}; choose from {', '.join(DTYPES)}")
        return 2

    print(f"device: {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), "
          f"torch {torch.__version__}")
    outcomes: list[Outcome] = []
    specs: dict[str, KernelSpec] = {}
    for name in names:
        if not starter_path(name).is_file():
            outcomes.append(Outcome(name, "skip", "no starter_cuda.py"))
            continue
        try:
            specs[name] = get_spec(name)
        except ValueError:
            outcomes.append(Outcome(name, "skip", "no spec in this build"))
            continue
        except Exception as e:
            outcomes.append(Outcome(name, "FAIL", f"spec failed to import: {type(e).__name__}: {e}"))

    started = time.perf_counter()
    built = build_all(list(specs), max(1, opts.jobs))
    print(f"built {len(built)} extension(s) in {time.perf_counter() - started:.0f} s")

    for name, spec in specs.items():
        secs, err = built[name]
        if err:
            outcomes.append(Outcome(name, "FAIL", f"build failed after {secs:.0f} s: {err}"))
            continue
        if opts.build_only:
            outcomes.append(Outcome(name, "ok", f"built in {secs:.0f} s"))
            continue
        try:
            fn = import_file(starter_path(name), f"ak_selfcheck_{name}").kernel_fn
            outcome = check_kernel(name, spec, fn, dtypes)
        except Exception:
            outcome = Outcome(name, "FAIL", "crashed: " + traceback.format_exc().strip().splitlines()[-1])
        outcomes.append(outcome)
        print(f"{outcome.name:<18} {outcome.status:<5} {outcome.detail}", flush=True)
        if opts.bench and outcome.status == "ok":
            try:
                print(bench_line(name, spec, fn, torch.bfloat16), flush=True)
            except Exception as e:
                print(f"    bench failed: {type(e).__name__}: {e}", flush=True)

    for outcome in outcomes:
        if outcome.status == "skip" or opts.build_only or outcome.detail.startswith("build failed"):
            print(f"{outcome.name:<18} {outcome.status:<5} {outcome.detail}")
    failed = [o.name for o in outcomes if o.status == "FAIL"]
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} fine" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
