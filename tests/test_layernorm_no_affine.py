"""A LayerNorm without weight or bias (nn.LayerNorm(elementwise_affine=False), or bias=False) end to end
(issue 17): the profiler gives it a layernorm row, the patch routes it to the kernel with None for what it
lacks (rows as wide as all normalized dims together), and the five stages feed a candidate those cases, so
one that cannot serve them is not kept."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from autokernel.engine.model_loading import load_model
from autokernel.engine.profiling import profile_model
from autokernel.engine.worker import Worker
from autokernel.kernels import get_spec

MODEL = '''
import torch
from torch import nn


class Model(nn.Module):
    """Norms with neither weight nor bias, a weight only, and neither over two dims, between linears."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.plain = nn.LayerNorm(64, elementwise_affine=False)
        self.no_bias = nn.LayerNorm(64, bias=False)
        nn.init.uniform_(self.no_bias.weight, 0.5, 1.5)  # not ones: a kernel that drops the weight shows
        self.two_dims = nn.LayerNorm((4, 16), elementwise_affine=False, eps=1e-3)

    def forward(self, x):
        h = self.no_bias(self.lin(self.plain(x)))
        return self.two_dims(h.view(*h.shape[:-1], 4, 16)).flatten(-2)


def get_inputs():
    return [torch.randn(2, 8, 64) * 3 + 1]
'''


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(MODEL)
    return path


def test_the_profiler_gives_a_norm_without_weight_or_bias_a_layernorm_row(model_file, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_MODEL_SIZE", "small")
    result = profile_model(load_model(model_file, "cpu"), warmup=1, iters=1)
    norms = [r for r in result.rows if r.kind == "layernorm"]
    assert norms, [(r.kind, r.name) for r in result.rows]
    assert all(r.target_shape == {"rows": 16, "cols": 64} for r in norms), [r.target_shape for r in norms]


PATCHED = '''
import importlib.util, sys
import torch
from autokernel.engine import kernel_patch
from autokernel.kernels import get_spec

spec = importlib.util.spec_from_file_location("model", sys.argv[1])
model_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model_module)
starter = importlib.util.spec_from_file_location("starter_layernorm", get_spec("layernorm").starters["triton"])
kernel = importlib.util.module_from_spec(starter)
starter.loader.exec_module(kernel)

calls = []
def kernel_fn(x, weight, bias, eps=1e-5):
    calls.append((tuple(x.shape), weight is None, bias is None, eps))
    return kernel.kernel_fn(x, weight, bias, eps)

torch.manual_seed(0)
model = model_module.Model().eval()
(x,) = model_module.get_inputs()
with torch.no_grad():
    ref = model(x)
    stats = kernel_patch.patch(model, {"layernorm": kernel_fn})
    out = model(x)
    again = model(x)
assert stats.modules["layernorm"] == 3, dict(stats.modules)
assert stats.calls["layernorm"] == 6 and not stats.fallbacks["layernorm"] and not stats.mismatches["layernorm"], stats
assert set(calls) == {((16, 64), True, True, 1e-05), ((16, 64), False, True, 1e-05), ((16, 64), True, True, 0.001)}, calls
assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4), (out - ref).abs().max()
assert torch.equal(out, again)
print("ok")
'''


def test_the_patched_model_sends_norms_without_weight_or_bias_to_the_starter(model_file):
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", PATCHED, str(model_file)], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_the_spec_feeds_the_cases_without_weight_or_bias():
    spec = get_spec("layernorm")
    assert {"no_affine", "no_bias"} <= set(spec.stability_modes)
    assert "None" in spec.notes and "None" in spec.summary
    gen = torch.Generator().manual_seed(1)
    for mode, has_weight in (("no_affine", False), ("no_bias", True)):
        x, weight, bias, eps = spec.make_inputs({"rows": 3, "cols": 40}, torch.float32, "cpu", gen, mode)
        assert (weight is not None, bias) == (has_weight, None), mode
        want = torch.nn.functional.layer_norm(x.double(), (40,), None if weight is None else weight.double(), None, eps)
        assert torch.allclose(spec.reference(x, weight, bias, eps).double(), want, atol=1e-5), mode


def test_a_candidate_that_needs_a_weight_and_bias_is_not_kept(tmp_path):
    # An older candidate's launcher: it reads weight and bias unconditionally, so a norm without them breaks it.
    source = get_spec("layernorm").starters["triton"].read_text()
    old = "    weight = weight.contiguous() if has_w else x2d\n    bias = bias.contiguous() if has_b else x2d\n"
    assert old in source, "the starter's launcher changed: update the mutation"
    bad = tmp_path / "candidate.py"
    bad.write_text(source.replace(old, "    weight, bias = weight.contiguous(), bias.contiguous()\n"))
    worker = Worker(device="cpu")
    try:
        report = worker.check(str(bad), kernel="layernorm", dtypes=["fp32"])
    finally:
        worker.close()
    failure = report.first_failure
    # smoke and the sweep (weight and bias given) pass; the regimes without them fail it
    assert not report.passed and failure is not None and failure.name == "stability", report
    assert "NoneType" in failure.detail, failure.detail
