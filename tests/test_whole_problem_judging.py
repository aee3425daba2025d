"""A whole problem is judged against what its own forward can do: a candidate as far from the exact answer as
the problem's forward is (a library conv in TF32, float32 cancellation) passes, held to KernelBench's tolerance
of that forward; a candidate whose runs differ passes only where the problem's own runs differ too."""

from __future__ import annotations

import textwrap

import pytest
import torch

from autokernel.engine.worker import Worker

# Float32 cancellation: x + 2^20 - 2^20 keeps x only to 1/16 (float64 keeps it whole). `noise` > 0 makes the
# forward itself differ from run to run, as a library kernel with atomics does.
PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, noise):
        super().__init__()
        self.noise = noise

    def forward(self, x):
        y = (x + 1048576.0) - 1048576.0
        return y + torch.rand_like(y) * self.noise if self.noise else y


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return [{noise}]
'''

CANDIDATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _shifted(x_ptr, y_ptr, n, wobble, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok)
    tl.store(y_ptr + offs, (x + 1048576.0) - 1048576.0 + {offset} + wobble, mask=ok)


class ModelNew(torch.nn.Module):
    def __init__(self, noise):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = torch.empty_like(x)
        wobble = {wobble} * (self.calls % 2)
        _shifted[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), wobble, BLOCK=1024)
        return y
'''


def _check(tmp_path, noise: float, offset: float = 0.0, wobble: float = 0.0):
    problem = tmp_path / f"cancel_{noise}.py"
    problem.write_text(textwrap.dedent(PROBLEM.replace("{noise}", repr(noise))))
    candidate = tmp_path / f"candidate_{offset}_{wobble}_{noise}.py"
    candidate.write_text(textwrap.dedent(CANDIDATE.format(offset=offset, wobble=wobble)))
    with Worker(device="cpu") as w:
        return w.check(str(candidate), kernel="problem", problem=str(problem), size="small")


def _stages(report):
    return {s.name: (s.status, s.detail) for s in report.stages}


def test_a_candidate_as_far_from_exact_as_the_problems_own_forward_passes(tmp_path):
    report = _check(tmp_path, noise=0.0)
    assert report.passed, _stages(report)


def test_the_allowance_never_excuses_an_error_of_the_candidates_own(tmp_path):
    report = _check(tmp_path, noise=0.0, offset=0.02)
    failed = report.first_failure
    assert failed is not None and failed.name == "smoke", _stages(report)
    assert "max abs error" in failed.detail


@pytest.mark.parametrize("noise, passes", [(0.0, False), (1e-6, True)])
def test_runs_may_differ_only_where_the_problems_own_runs_do(tmp_path, noise, passes):
    report = _check(tmp_path, noise=noise, wobble=2e-6)
    stages = _stages(report)
    if passes:
        assert report.passed, stages
        assert "as the problem's own forward" in stages["determinism"][1], stages
    else:
        assert stages["determinism"][0] == "fail" and "differs from run 1" in stages["determinism"][1], stages


class _GradSensitive(torch.nn.Module):
    """Doubles its input; with autograd on it raises `error` (as an `out=` call does, or memory the saved
    tensors of a real-size forward would need)."""

    def __init__(self, error):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.error = error

    def forward(self, x):
        if torch.is_grad_enabled():
            raise self.error
        return x * 2 * self.weight


class _Broken(torch.nn.Module):
    def forward(self, x):
        raise ValueError("broken")


def test_autograd_on_is_required_but_its_memory_is_not():
    from autokernel.engine.problem_spec import AutogradOnlyFailure, _autograd_first, call_autograd_first

    x = torch.ones(3)
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    # the harness's first call: out of memory with autograd's saved tensors -> judged without them
    assert torch.equal(_autograd_first(_GradSensitive(oom))(x), x * 2)
    # ... but a failure of the candidate's own with autograd on refuses it, saying so
    wrong = RuntimeError("addmm(): functions with out=... arguments don't support automatic differentiation")
    with pytest.raises(RuntimeError, match="fails with autograd on .*not without: RuntimeError: addmm.*out="):
        _autograd_first(_GradSensitive(wrong))(x)
    # and one that fails either way is reported as its own failure, unchanged
    with pytest.raises(ValueError, match="^broken$"):
        _autograd_first(_Broken())(x)
    # the final check's first trial makes the same call, from inside its own no_grad
    with torch.no_grad():
        assert torch.equal(call_autograd_first(_GradSensitive(oom), [x]), x * 2)
        with pytest.raises(AutogradOnlyFailure, match="not without: RuntimeError: addmm"):
            call_autograd_first(_GradSensitive(wrong), [x])
