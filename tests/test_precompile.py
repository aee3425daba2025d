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
    monkeypatch.setattr(harness, "make_args", lambda ctx, shape, dtype, mode: (shape, dtype))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls, threads = [], set()

    def kernel_fn(shape, dtype):
        threads.add(threading.get_ident())
        time.sleep(0.02)
        calls.append((json.dumps(shape, sort_keys=True), dtype))
        if dtype == torch.float16:
            raise RuntimeError("a failure the stages will report, not the warm-up")

    ctx = _ctx(kernel_fn)
    made = precompile.warm(ctx, threads=4)
    expected = precompile.specializations(ctx)
    assert made == len(expected) == len(calls) == len(set(calls))
    spec = get_spec("softmax")
    shapes = {json.dumps(s, sort_keys=True) for s, _ in expected}
    assert json.dumps(spec.smoke_shape, sort_keys=True) in shapes
    assert all(json.dumps(s, sort_keys=True) in shapes for s in spec.sweep_shapes + spec.edge_shapes)
    assert {d for _, d in expected} == set(spec.dtypes)
    assert len(threads) > 1


def test_screening_dtypes_limit_the_warm_up_too(monkeypatch):
    monkeypatch.setattr(harness, "make_args", lambda ctx, shape, dtype, mode: (shape, dtype))
    ctx = harness.CheckContext(get_spec("softmax"), lambda *a: None, "cuda", dtypes=(torch.bfloat16,))
    assert {d for _, d in precompile.specializations(ctx)} == {torch.bfloat16}


def test_skipped_on_the_interpreter_and_for_autotuned_candidates():
    called = []
    assert precompile.warm(_ctx(lambda *a: called.append(a), device="cpu")) == 0
    triton = __import__("triton")

    @triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["n"])
    @triton.jit
    def tuned(x_ptr, n):
        pass

    module = types.ModuleType("candidate")
    module.tuned = tuned
    assert precompile.autotuned(module)
    assert precompile.warm(_ctx(lambda *a: called.append(a)), module) == 0
    assert not called and not precompile.autotuned(types.ModuleType("plain"))
