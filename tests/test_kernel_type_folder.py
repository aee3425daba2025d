"""A kernel type is one folder: a toy type (`negate`, y = -x) written into a temporary folder and named by
AUTOKERNEL_KERNEL_DIRS is profiled, searched by the playbook agent and patched into the model, through the
real command line, with nothing of the library edited and nothing written outside the test's folder."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

INIT = '''
"""A toy kernel type: y = -x, elementwise, in x's dtype."""

import torch

from ..spec import KernelSpec, random_tensor, starters_beside


def reference(x):
    return -x


def make_inputs(shape, dtype, device, gen, mode="normal"):
    return (random_tensor((int(shape["rows"]), int(shape["cols"])), dtype, device, gen, mode),)


def bytes_moved(shape, dtype):
    return 2 * int(shape["rows"]) * int(shape["cols"]) * torch.empty((), dtype=dtype).element_size()


SPEC = KernelSpec(
    name="negate",
    signature="kernel_fn(x)",
    summary="y = -x over x [rows, cols]",
    reference=reference,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=lambda shape, dtype: int(shape["rows"]) * int(shape["cols"]),
    metric="GB/s",
    smoke_shape={"rows": 4, "cols": 64},
    sweep_shapes=({"rows": 3, "cols": 100},),
    edge_shapes=({"rows": 1, "cols": 1},),
    bench_shapes=({"rows": 64, "cols": 256},),
    tolerances={torch.float32: (0.0, 0.0), torch.float16: (0.0, 0.0), torch.bfloat16: (0.0, 0.0)},
    forbidden_ops=frozenset({"aten::neg"}),
    starters=starters_beside(__file__),
    batch_dims=("rows",),
)
'''

KERNEL = '''
import torch
import triton
import triton.language as tl

BLOCK = {block}


@triton.jit
def _negate(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(y_ptr + offs, (-x).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    _negate[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
    return y
'''

TEMPLATE = '''
"""The playbook's space of the toy type: the block each program negates, a constant of its starter."""

from autokernel.playbook.templates import Knob
from autokernel.playbook.templates._source import render_starter

KERNEL = "negate"
METRIC = "GB/s"
SPACE = (Knob("block", 1, (256, 512, 1024), "a block of {new} elements instead of {old} changes how many programs run"),)
DEFAULTS = {"block": 1024}


def render(params):
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})
'''

RECOGNISE = '''
"""The profiler sees the toy type in a call of torch.neg (or -x)."""

from autokernel.engine.attribution import numel

OPS = frozenset({"neg"})


def shape(ops):
    for op in ops:
        args = op.tensor_args()
        if op.short == "neg" and args and args[0][0]:
            s = args[0][0]
            return {"rows": numel(s[:-1]), "cols": s[-1]}
    return None
'''

ROUTE = '''
"""The patch sends torch.neg and Tensor.neg / -x of a tensor the kernel takes to the kernel."""

import torch

from autokernel.engine.kernel_patch import Op, Route, needs_grad, rows, same_as_input


def _neg(args, kwargs, entry):
    x = args[0] if args else None
    if len(args) != 1 or kwargs or not entry.accepts(x) or x.dim() < 1 or needs_grad(x):
        return None
    return "negate", (x,)


ROUTE = Route(
    "negate",
    ops=[Op("negate", "Tensor x", same_as_input, lambda s, x: s.entry.fn(rows(x, x.shape[-1])).reshape(x.shape),
            reference=lambda x: torch.neg(x), site="neg")],
    functions={torch.neg: _neg, torch.Tensor.neg: _neg, torch.Tensor.__neg__: _neg},
)
'''

MODEL = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.neg(x * 2.0)


def get_inputs():
    return [torch.randn(64, 256)]
'''


def _write_type(kinds: Path) -> None:
    folder = kinds / "negate"
    folder.mkdir(parents=True)
    files = {"__init__.py": INIT, "starter_triton.py": KERNEL.format(block=1024), "template.py": TEMPLATE,
             "recognise.py": RECOGNISE, "route.py": ROUTE}
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())


def _library_files() -> set[str]:
    """The library's own source folders, as files (caches left out): what adding a type must not touch."""
    return {str(p.relative_to(ROOT)) for top in ("engine", "kernels", "playbook", "tui") for p in (ROOT / top).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _events(db: Path, kind: str) -> list[dict]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT payload FROM events WHERE type=? ORDER BY seq", [kind]).fetchall()
    return [json.loads(r[0]) for r in rows]


@pytest.mark.timeout(900)
def test_a_kernel_type_added_as_one_folder_is_profiled_searched_and_patched(tmp_path):
    kinds = tmp_path / "kinds"
    _write_type(kinds)
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL).lstrip())
    before = _library_files()
    env = {**os.environ, "AUTOKERNEL_KERNEL_DIRS": str(kinds), "HOME": str(tmp_path / "home"),
           "AUTOKERNEL_CACHE_DIR": str(tmp_path / "cache"), "TRITON_CACHE_DIR": str(tmp_path / "triton"),
           "TRITON_INTERPRET": "1"}
    db = tmp_path / "s.db"
    proc = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "optimize", str(tmp_path / "model.py"),
                           "--headless", "--device", "cpu", "--max-experiments", "2", "--db", str(db)],
                          capture_output=True, text=True, timeout=840, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # profiled: the model's torch.neg is a row of the toy type, at the model's shape
    rows = [r for e in _events(db, "profile_ready") for r in e["rows"] if r["kind"] == "negate"]
    assert rows and rows[0]["target_shape"] == {"rows": 64, "cols": 256}, proc.stdout[-3000:]
    # searched: the starter, then the starter with its one knob moved by the folder's playbook template, both
    # correct (kept, or discarded as no faster: timings on the interpreter decide which), the starter kept
    written = [c for c in _events(db, "candidate_written") if c["target"] == "negate"]
    assert len(written) == 2 and "BLOCK = 512" in written[1]["source"], proc.stdout[-3000:]
    decided = {d["candidate_id"]: d["decision"] for d in _events(db, "decision") if d["target"] == "negate"}
    assert decided[written[0]["candidate_id"]] == "kept", proc.stdout[-3000:]
    assert decided[written[1]["candidate_id"]] in ("kept", "discarded"), proc.stdout[-3000:]
    # patched: the integrated model called the kept kernel, and its output agreed with PyTorch's
    done = _events(db, "integration_result")
    assert done and done[-1]["correct"], proc.stdout[-3000:]
    negate = [r for r in done[-1]["replaced"] if r["kind"] == "negate"]
    assert negate and negate[0]["calls"] >= 1 and not negate[0]["mismatches"], done[-1]
    # nothing of the library was written
    assert _library_files() == before


def test_an_added_type_is_listed_after_the_library_and_its_route_ships_standalone(tmp_path, monkeypatch):
    """In process: discovery lists the toy type after the library's types (their order unchanged), the
    profiler's attribution and the patch use its hooks, and `patch_source` carries its route into a copy of
    the patcher that runs where autokernel cannot be imported; unnamed again, the type is gone."""
    import torch

    from autokernel import kernels
    from autokernel.engine.attribution import kind_of_op
    from autokernel.engine.kernel_patch import routed_calls

    library = kernels.available()
    kinds = tmp_path / "kinds"
    _write_type(kinds)
    monkeypatch.setenv("AUTOKERNEL_KERNEL_DIRS", str(kinds))
    try:
        assert kernels.available() == [*library, "negate"] and kernels.get_spec("negate").name == "negate"
        assert kind_of_op("aten::neg") == "negate"
        model = type("M", (torch.nn.Module,), {"forward": lambda self, x: torch.neg(x) + x.neg()})()
        assert routed_calls(model, [torch.randn(4, 8)])["negate"] == 2

        source = kernels.patch_source(["negate"])
        script = textwrap.dedent(f'''
            import builtins, sys, torch
            real = builtins.__import__
            def guarded(name, *a, **k):
                if name.startswith("autokernel"):
                    raise ImportError("autokernel is off limits")
                return real(name, *a, **k)
            builtins.__import__ = guarded
            sys.path.insert(0, {str(tmp_path)!r})
            import bundled
            stats = bundled.patch(torch.nn.Module(), {{}})  # registers the operators
            mode = bundled.KernelMode({{"negate": bundled.KernelEntry("negate", lambda x: x * -1)}}, stats)
            with mode:
                y = torch.neg(torch.ones(3, 5))
            assert torch.equal(y, -torch.ones(3, 5)) and stats.calls["negate"] == 1, stats
            assert list(bundled.routes()) == ["negate"]
            print("ok")
        ''')
        (tmp_path / "bundled.py").write_text(source)
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env={k: v for k, v in os.environ.items() if k != "AUTOKERNEL_KERNEL_DIRS"})
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    finally:
        monkeypatch.delenv("AUTOKERNEL_KERNEL_DIRS")
        for name in [m for m in sys.modules if m.startswith("autokernel.kernels.negate")]:
            del sys.modules[name]
    assert kernels.available() == library
    with pytest.raises(ValueError, match="unknown kernel 'negate'"):
        kernels.get_spec("negate")
