"""`autokernel export`: a session's kept kernels as a plain Python package, importable without this tool.

The package holds one module per kernel (the candidate's source, verbatim but for its imports of the
vendored `_cuda_build.py` and `_triton_common.py`), `_patch.py` (`kernel_patch.py` with the kept kinds'
routes appended, `autokernel.kernels.patch_source`: it imports only torch), an `__init__.py` with
`patch(model)`, `KERNELS` and `APPLIED`, and `RESULTS.md` with what was measured. Only torch and triton
are needed to use it.
`_patch.py` registers the kernels as custom operators named after the package, so a patched model
compiles whole and two exported packages load into one process.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from .errors import UserError
from .problem_spec import PROBLEM_TARGET
from .search_state import CandidateRecord, SearchState, TargetState
from .store import Store

MARKER = "autokernel-export"
CUDA_BUILD_IMPORT = "from autokernel.kernels.cuda_build import"
TRITON_COMMON_IMPORT = "from autokernel.kernels.triton_common import"


def _fmt(v: Any, unit: str = "", digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}g}{unit}"
    return f"{v}{unit}"


def applied_kinds(integ, kinds: list[str]) -> list[str]:
    """The kinds an export's `patch(model)` applies: the subset that integration's recommended forward uses
    when it is a patched one (engine/kernel_selection.py chose it: a kernel that breaks a torch.compile
    fusion stays out of patched + torch.compile); every kind when integration recommended an unpatched
    forward, did not run, or predates the subset search (its `replaced` items have no `chosen`)."""
    if integ is None or not integ.correct or integ.recommended not in ("patched", "patched_compile"):
        return list(kinds)
    items = [r for r in integ.replaced if isinstance(r, dict) and "chosen" in r]
    if not items:
        return list(kinds)
    picked = {r.get("kind") for r in items if integ.recommended in r["chosen"]}
    return [k for k in kinds if k in picked]


def _init_source(pkg: str, session: dict, chosen: list[tuple[TargetState, CandidateRecord]],
                 tolerances: dict[str, dict], applied: list[str], recommended: str) -> str:
    imports = "\n".join(f"from . import {t.name} as _{t.name}" for t, _ in chosen)
    recommended_text = {"patched": "patched eager", "patched_compile": "patched + torch.compile"}.get(
        recommended, f"it recommended {recommended}, so all of them" if recommended else "not integrated: all of them")
    table = ",\n".join(
        f"    {t.name!r}: {{\"module\": _{t.name}, \"candidate\": {c.candidate_id!r}, "
        f"\"tolerances\": {json.dumps(tolerances.get(t.name, {}))}}}" for t, c in chosen)
    return f'''"""Kernels found by autokernel session {session["id"]} ({session.get("device_name") or session.get("device")}).

    import {pkg}
    stats = {pkg}.patch(model)   # swaps the kernels in APPLIED into `model` in place
    fast = torch.compile(model)  # optional: Inductor fuses around the kernels (patch before or after)

`patch(model)` applies APPLIED, the kernels the integration chose for its fastest patched forward
({recommended_text}): a subset of KERNELS when a kernel made that forward slower.
`patch(model, kinds=KERNELS)` applies them all.

See RESULTS.md for what was measured. Needs only torch and triton. Without a CUDA GPU the Triton
kernels run under Triton's interpreter (set here before they are defined): correct, but slow. The
kernels are custom operators in the namespace torch.ops.autokernel_{pkg} (see `_patch.namespace()`).
"""

import os as _os

import torch as _torch

if not _torch.cuda.is_available():
    _os.environ.setdefault("TRITON_INTERPRET", "1")

from . import _patch  # noqa: E402
{imports}  # noqa: E402

KERNELS = {{
{table}
}}
APPLIED = {applied!r}


def patch(model, verify=True, kinds=None):
    """Swap the kernels of `kinds` (default APPLIED) into `model` (in place) where a call matches a
    kernel's contract.

    With `verify` the first call at each site and shape is also run through PyTorch and compared;
    a kernel that disagrees is not used there. `model` may already be `torch.compile`d. Returns the
    counts of what went where.
    """
    kinds = APPLIED if kinds is None else list(kinds)
    table = {{kind: _patch.KernelEntry(kind, KERNELS[kind]["module"].kernel_fn, tolerances=KERNELS[kind]["tolerances"])
             for kind in kinds}}
    return _patch.patch(model, table, verify=verify)
'''


def _results_md(session: dict, state: SearchState, chosen, left_out: list[str], pkg: str, out: Path,
                applied: list[str]) -> str:
    cfg = dict(session.get("config") or {})
    lines = [f"# Kernels from autokernel session `{session['id']}`", ""]
    lines += [f"- model: `{session.get('model')}`", f"- device: {session.get('device_name') or session.get('device')}",
              f"- agent: {session.get('agent')}", f"- experiments: {state.experiments}",
              f"- session status: {session.get('status')}",
              f"- exported: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", ""]
    meaningful = all((c.bench or {}).get("meaningful", True) for _, c in chosen)
    if not meaningful:
        lines += ["> Timed on the CPU under Triton's interpreter: these times are not meaningful for a GPU.", ""]
    lines += ["## Kernels", "",
              "| kernel | candidate | variant | shape | dtype | kernel ms | eager ms | torch.compile ms | vs eager | vs compile | of ceiling |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t, c in chosen:
        b = c.bench or {}
        shape = ", ".join(f"{k}={v}" for k, v in t.shape.items())
        frac = b.get("fraction_of_ceiling")
        lines.append(f"| {t.name} | {c.candidate_id} | {c.label} | {shape} | {t.dtype} | {_fmt(b.get('kernel_ms'))} | "
                     f"{_fmt(b.get('eager_ms'))} | {_fmt(b.get('compile_ms'))} | {_fmt(b.get('speedup_eager'), 'x', 3)} | "
                     f"{_fmt(b.get('speedup_compile'), 'x', 3)} | {_fmt(frac * 100 if frac is not None else None, '%', 3)} |")
    walled = [f"{t.name} {c.candidate_id}: {c.bench['timing']}" for t, c in chosen if (c.bench or {}).get("timing")]
    if walled:  # speedups above compare wall clock with wall clock for these: say why, with the events beside
        lines += ["", "Timed by wall clock, eager and torch.compile alike: " + "; ".join(walled)]
    if left_out:
        lines += ["", "Left out (would slow the model down): " + "; ".join(left_out)]
    integ = state.integration
    lines += ["", "## The model with the kernels swapped in", ""]
    if integ is None:
        lines.append("Not integrated in this session.")
    else:
        lines += [f"- outputs match the original: **{'yes' if integ.correct else 'NO'}** (max abs error {integ.max_abs_error:.3g})",
                  f"- forward: {_fmt(integ.model_ms)} ms patched, {_fmt(integ.eager_ms)} ms eager, "
                  f"{_fmt(integ.compile_ms)} ms torch.compile, {_fmt(integ.patched_compile_ms)} ms patched + torch.compile"
                  + (f" (fastest: {integ.recommended})" if integ.recommended else ""),
                  f"- speedup: {_fmt(integ.speedup_eager, 'x', 3)} vs eager, {_fmt(integ.speedup_compile, 'x', 3)} vs torch.compile"
                  + ("" if integ.meaningful else " (CPU: not meaningful)"),
                  f"- `patch(model)` applies: {', '.join(applied) or 'none'}"
                  + ("" if len(applied) == len(chosen) else f" (of {', '.join(t.name for t, _ in chosen)}: the subset "
                     f"the fastest forward uses; `patch(model, kinds={pkg}.KERNELS)` applies all)"),
                  f"- {integ.detail}"]
    run = ["autokernel optimize", cfg.get("model_path") or session.get("model") or "", "--headless",
           f"--device {cfg.get('device') or session.get('device')}", f"--agent {cfg.get('agent') or session.get('agent')}"]
    if cfg.get("max_experiments"):
        run.append(f"--max-experiments {cfg['max_experiments']}")
    if cfg.get("size"):
        run.append(f"--size {cfg['size']}")
    lines += ["", "## Use", "", "```python", f"import {pkg}", f"{pkg}.patch(model)", "```", "",
              "## Re-run", "", "```", " ".join(r for r in run if r), f"autokernel export {session['id']} -o {out}", "```", ""]
    return "\n".join(lines)


def export_session(store: Store, ref: str, out_dir: str | Path, force: bool = False) -> dict[str, Any]:
    """Write the package for session `ref` (id, prefix or `latest`: the newest optimize session, since only
    those keep kernels) into `out_dir`; returns what was written."""
    session = store.session(ref, kind="optimize")
    if session["kind"] != "optimize":
        raise UserError(f"session {session['id']} is a {session['kind']} session: only optimize sessions have kernels")
    state = SearchState.from_events(session["id"], store.iter_events(session["id"]))
    chosen, left_out = state.to_integrate()
    left_out += [f"{t.name}: {c.candidate_id} is a whole ModelNew, not a kernel (its model_new.py is in the session's "
                 "integration folder)" for t, c in chosen if t.name == PROBLEM_TARGET]
    chosen = [(t, c) for t, c in chosen if t.name != PROBLEM_TARGET]
    if not chosen:
        raise UserError(f"session {session['id']} kept no kernel worth exporting"
                        + (f" ({'; '.join(left_out)})" if left_out else ""))
    out = Path(out_dir).expanduser().resolve()
    pkg = out.name
    if not pkg.isidentifier():
        raise UserError(f"the output folder's name {pkg!r} must be a Python identifier: it becomes the package name")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UserError(f"{out} exists and is not empty (use --force to overwrite)")
        if not (out / ".autokernel-export").exists():
            raise UserError(f"{out} is not an earlier autokernel export; refusing to overwrite it")
        shutil.rmtree(out)
    tmp = out.with_name(f".{pkg}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        _write_package(tmp, session, state, chosen, left_out, pkg, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.replace(out)
    return {"session_id": session["id"], "path": str(out), "package": pkg,
            "kernels": [{"kind": t.name, "candidate_id": c.candidate_id} for t, c in chosen], "left_out": left_out}


def vendor_cuda_build(package: Path) -> None:
    """Copy the CUDA build helper into an exported package as `_cuda_build.py`, with the shared headers it
    puts on every build's include path (`include/`, beside it there as in the library)."""
    from autokernel.kernels import cuda_build

    (package / "_cuda_build.py").write_text(Path(cuda_build.__file__).read_text())
    shutil.copytree(cuda_build.INCLUDE_DIR, package / cuda_build.INCLUDE_DIR.name, dirs_exist_ok=True)


def vendor_triton_common(package: Path) -> None:
    """Copy the shared Triton helpers (kernels/triton_common.py, which imports only torch and triton) into an
    exported package as `_triton_common.py`."""
    from autokernel.kernels import triton_common

    (package / "_triton_common.py").write_text(Path(triton_common.__file__).read_text())


def _write_package(tmp: Path, session: dict, state: SearchState, chosen, left_out: list[str], pkg: str, out: Path) -> None:
    from autokernel.kernels import get_spec, patch_source
    from autokernel.kernels.spec import DTYPE_NAMES

    from . import kernel_patch

    tolerances = {}
    for t, c in chosen:
        source = c.source
        if CUDA_BUILD_IMPORT in source:  # CUDA candidates build through our helper: vendor it (it imports only torch)
            vendor_cuda_build(tmp)
            source = source.replace(CUDA_BUILD_IMPORT, "from ._cuda_build import")
        if TRITON_COMMON_IMPORT in source:  # a Triton starter's shared helpers: vendored the same way
            vendor_triton_common(tmp)
            source = source.replace(TRITON_COMMON_IMPORT, "from ._triton_common import")
        if re.search(r"^\s*(from|import)\s+autokernel\b", source, re.M):
            raise UserError(f"{c.candidate_id} imports autokernel, so it cannot be exported standalone")
        (tmp / f"{t.name}.py").write_text(source)
        try:
            spec = get_spec(t.name)
        except Exception:  # a kernel type this build no longer has: the patcher's default tolerances
            spec = None
        tolerances[t.name] = {DTYPE_NAMES[d]: list(v) for d, v in getattr(spec, "tolerances", {}).items()
                              if d in DTYPE_NAMES}
        starter = getattr(spec, "starters", {}).get(t.backend)
        if (c.is_starter or CUDA_BUILD_IMPORT in c.source) and starter is not None:  # .cu files it builds
            for extra in Path(starter).parent.glob("*.cu*"):
                shutil.copy(extra, tmp / extra.name)
    (tmp / "_patch.py").write_text(patch_source([t.name for t, _ in chosen]))  # every kept kind: kinds=KERNELS works
    if any("kernel_fn.subgraph = " in c.source for _, c in chosen):  # subgraph kernels: _patch.py imports it
        (tmp / "subgraph_patch.py").write_text((Path(kernel_patch.__file__).parent / "subgraph_patch.py").read_text())
    integ = state.integration
    applied = applied_kinds(integ, [t.name for t, _ in chosen])
    (tmp / "__init__.py").write_text(_init_source(pkg, session, chosen, tolerances, applied,
                                                  integ.recommended if integ is not None else ""))
    (tmp / "RESULTS.md").write_text(_results_md(session, state, chosen, left_out, pkg, out, applied))
    (tmp / ".autokernel-export").write_text(json.dumps({"session": session["id"], "kind": MARKER}))
