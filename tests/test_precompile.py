"""The parallel warm-up before the stages: every specialization the stages use, once, from several
threads; nothing judged, nothing raised; skipped where it cannot help (CPU interpreter, autotuned)."""

from __future__ import annotations

import json
import threading
import time
import types

import torch

from autokernel.engine import harness, precompile
from autokernel.kernels import get_spec


def _ctx(fn, device="cuda"):
    # device "cuda" only selects the path: the fake kernel never touches a GPU, and make_args is patched
    return harness.CheckContext(get_spec("softmax"), fn, device)


def test_every_specialization_once_from_several_threads(monkeypatch):
    monkeypatch.setattr(harness, "make_args", lambda ctx, shape, dtype, mode: (shape, dtype, False))
    monkeypatch.setattr(harness, "noncontiguous_args", lambda ctx, args: (*args[:2], True))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls, threads = [], set()

    def kernel_fn(shape, dtype, strided):
        threads.add(threading.get_ident())
        time.sleep(0.02)
        calls.append((json.dumps(shape, sort_keys=True), dtype, strided))
        if dtype == torch.float16:
            raise RuntimeError("a failure the stages will report, not the warm-up")

    ctx = _ctx(kernel_fn)
    made = precompile.warm(ctx, threads=4)
    expected = precompile.specializations(ctx)
    assert made == len(expected) == len(calls) == len(set(calls))
    spec = get_spec("softmax")
    shapes = {json.dumps(s, sort_keys=True) for s, _, strided in expected if not strided}
    assert json.dumps(spec.smoke_shape, sort_keys=True) in shapes
    assert all(json.dumps(s, sort_keys=True) in shapes for s in spec.sweep_shapes + spec.edge_shapes)
    assert {d for _, d, _ in expected} == set(spec.dtypes)
    # the edge-case stage's strided views are warmed as they will be called: the same shapes, as views
    views = {json.dumps(s, sort_keys=True) for s, _, strided in expected if strided}
    assert views == {json.dumps(s, sort_keys=True) for s in harness.view_shapes(ctx, harness._edge_shapes(ctx)[0])}
    assert views and {c for c in calls if c[2]} == {(v, d, True) for v in views for d in spec.dtypes}
    assert len(threads) > 1


def test_screening_dtypes_limit_the_warm_up_too(monkeypatch):
    monkeypatch.setattr(harness, "make_args", lambda ctx, shape, dtype, mode: (shape, dtype))
    ctx = harness.CheckContext(get_spec("softmax"), lambda *a: None, "cuda", dtypes=(torch.bfloat16,))
    assert {d for _, d, _ in precompile.specializations(ctx)} == {torch.bfloat16}


def test_skipped_on_the_interpreter():
    called = []
    assert precompile.warm(_ctx(lambda *a: called.append(a), device="cpu")) == 0
    assert not called


class _RecordingKernel:
    """Stands for the JITFunction under an autotuner: records each run's arguments (compiling needs a GPU)."""

    def __init__(self):
        self.runs = []

    def run(self, *args, **kwargs):
        self.runs.append((args, kwargs))


def _autotuned_module():
    import triton
    import triton.language as tl

    def prune(configs, named_args, **kwargs):  # as a real one would: a tile wider than the row is dropped
        return [c for c in configs if c.kwargs["BLOCK"] <= max(16, named_args["n"])]

    @triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})
    @triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4),
                              triton.Config({"BLOCK": 1024}, num_warps=8)],
                     key=["n"], prune_configs_by={"early_config_prune": prune})
    @triton.jit
    def tuned(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        pass

    module = types.ModuleType("candidate")
    module.tuned = tuned  # the heuristics wrapper: the autotuner is under it
    (tuner,) = precompile.autotuners(module)
    tuner.fn = _RecordingKernel()
    return module, tuner


def test_an_autotuned_kernel_compiles_each_config_and_runs_none(monkeypatch):
    from triton.runtime.autotuner import Autotuner

    module, tuner = _autotuned_module()
    assert precompile.autotuners(module) and not precompile.autotuners(types.ModuleType("plain"))
    monkeypatch.setattr(Autotuner, "_bench", lambda *a, **k: (_ for _ in ()).throw(AssertionError("timed")))
    monkeypatch.setattr(harness, "make_args", lambda ctx, shape, dtype, mode: ("x", 100))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    made = precompile.warm(_ctx(lambda x, n: module.tuned[(1,)](x, n)), module, threads=4)
    assert made == len(precompile.specializations(_ctx(None))) and made > 1
    compiled = {(kw["BLOCK"], kw["num_warps"]) for _, kw in tuner.fn.runs}
    assert compiled == {(16, 2), (64, 4)}  # the pruned config is not compiled
    assert all(kw["warmup"] is True and kw["EVEN"] is True for _, kw in tuner.fn.runs)  # compiled, never launched
    assert "run" not in vars(tuner) and tuner.cache == {}  # the autotuner is itself again, nothing chosen

    tuner.fn.runs.clear()  # outside the warm-up the autotuner times and launches as ever
    monkeypatch.setattr(Autotuner, "_bench", lambda self, *a, config, **k: [float(config.kwargs["BLOCK"])])
    module.tuned[(1,)]("x", 100)
    assert len(tuner.fn.runs) == 1 and tuner.fn.runs[0][1]["warmup"] is False and tuner.fn.runs[0][1]["BLOCK"] == 16


def test_on_unless_turned_off(monkeypatch):
    monkeypatch.delenv(precompile.ENV, raising=False)
    assert precompile.enabled()
    monkeypatch.setenv(precompile.ENV, "0")
    assert not precompile.enabled()
    monkeypatch.setenv(precompile.ENV, "1")
    assert precompile.enabled()
