"""KernelBench at its real sizes, on a small device: the harness plans each trial's memory against an injected
budget (AUTOKERNEL_MEMORY_BUDGET, read by `fit.free_bytes`), so a small problem on a tiny budget behaves as a
6 GiB problem does on an 80 GB GPU. A problem that fits only without the float64 copies is judged in its own
dtype (and says so), a wrong candidate is still refused there, a problem larger than the device gets the
no-fit verdict naming its own footprint, and nothing of a judged trial or an earlier problem stays alive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from autokernel.engine import harness, outputs
from autokernel.engine.fit import BUDGET_ENV, needs_gib, no_fit
from autokernel.engine.worker import Worker
from autokernel.kernels import get_spec

HERE = Path(__file__).parent
CUMSUM = HERE / "kernelbench_problems" / "level1" / "4_cumsum.py"
ROWS, COLS = 16, 128  # its small size: one fp32 input and one fp32 output of this shape, no weights
TENSOR = ROWS * COLS * 4
FOOTPRINT = 3 * TENSOR  # the input, the Model's output and ModelNew's output
OWN_ONLY = 4 * TENSOR + 4096  # room for a trial in fp32 (with its snapshot of the input), not for float64 copies
OWN_NOTE = "judged against the reference in the inputs' own dtype, fp32 (atol=0.01, rtol=0.01)"

GOOD = '''import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + offs, tl.cumsum(x, axis=0), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _cumsum_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''
WRONG = GOOD.replace("tl.cumsum(x, axis=0)", "tl.cumsum(x, axis=0) * 1.05")  # 5% off: beyond atol = rtol = 1e-2


def _check(tmp_path, monkeypatch, budget: int | None, **sources: str) -> dict:
    if budget is not None:
        monkeypatch.setenv(BUDGET_ENV, str(budget))
    for name, source in sources.items():
        (tmp_path / f"{name}.py").write_text(source)
    with Worker(device="cpu") as w:
        return {name: w.check(str(tmp_path / f"{name}.py"), kernel="problem", problem=str(CUMSUM), size="small")
                for name in sources}


def test_a_problem_that_fits_only_without_float64_copies_is_judged_in_its_own_dtype(tmp_path, monkeypatch):
    reports = _check(tmp_path, monkeypatch, OWN_ONLY, good=GOOD, wrong=WRONG)
    good, wrong = reports["good"], reports["wrong"]
    assert good.passed, [(s.name, s.status, s.detail) for s in good.stages]
    assert OWN_NOTE in good.stages[0].detail and OWN_NOTE in good.stages[1].detail
    failed = wrong.first_failure  # the wrong candidate is still refused on that path, which says so
    assert failed is not None and failed.name == "smoke", [(s.name, s.status, s.detail) for s in wrong.stages]
    assert "max abs error" in failed.detail and OWN_NOTE in failed.detail
    assert not no_fit(failed.detail, "cpu")


def test_a_problem_larger_than_the_device_gets_no_fit_with_its_own_footprint(tmp_path, monkeypatch):
    report = _check(tmp_path, monkeypatch, FOOTPRINT - 1024, good=GOOD)["good"]
    detail = report.stages[0].detail
    verdict = no_fit(detail, "cpu")  # what the search and the KernelBench batch read from it
    assert verdict.startswith("does not fit on this CPU: needs "), detail
    assert abs(needs_gib(verdict) * 2**30 - FOOTPRINT) <= FOOTPRINT * 5e-3  # the footprint, not an allocation


def test_a_kernel_target_is_judged_in_its_own_dtype_then_told_it_does_not_fit(monkeypatch):
    """The softmax starter on a budget that holds its smoke trial in fp32 only: the smoke stage passes against
    an fp32 reference with twice the kernel's tolerance; the sweep's larger shapes get the no-fit verdict."""
    spec = get_spec("softmax")
    ctx = harness.CheckContext(spec, None, "cpu")
    smoke = harness.footprint(ctx, spec.smoke_shape, torch.float32)
    budget = smoke.to_allocate + smoke.inputs
    assert harness.plan_trial.__doc__ and smoke.to_allocate + smoke.inputs + 2 * smoke.wide > budget
    monkeypatch.setenv(BUDGET_ENV, str(budget))
    with Worker(device="cpu") as w:
        report = w.check(str(spec.starters["triton"]), kernel="softmax", dtypes=["fp32"])
    smoke_stage, sweep = report.stages[0], report.stages[1]
    atol, rtol = spec.tolerance(torch.float32)
    assert smoke_stage.status == "pass", smoke_stage.detail
    assert f"fp32 (atol={2 * atol:.2g}, rtol={2 * rtol:.2g})" in smoke_stage.detail
    verdict = no_fit(sweep.detail, "cpu")
    assert sweep.status == "fail" and verdict, sweep.detail
    too_big = {harness.footprint(ctx, s, torch.float32).total for s in spec.sweep_shapes
               if harness.footprint(ctx, s, torch.float32).to_allocate > budget}
    assert any(abs(needs_gib(verdict) * 2**30 - t) <= t * 5e-3 for t in too_big), (verdict, too_big)


def test_a_worker_passes_the_verdict_on_with_its_footprint():
    line = "correctness: smoke: fail: the problem: DoesNotFit: does not fit on this GPU: needs 18.5 GiB (its inputs)"
    assert no_fit(line, "cuda") == "does not fit on this GPU: needs 18.5 GiB"


def test_values_are_compared_a_chunk_at_a_time_and_the_worst_is_found_anywhere(monkeypatch):
    monkeypatch.setattr(outputs, "COMPARE_CHUNK", 100)
    spec = get_spec("softmax")
    ctx = harness.CheckContext(spec, None, "cpu")
    ref = torch.rand(8, 1024, dtype=torch.float64)
    out = ref.float().clone()
    out[3, 17] += 0.5
    out[6, 1000] += 2.0  # in a later chunk, and the worst
    try:
        harness.compare(ctx, out, ref, torch.float32, "normal", "here")
        raise AssertionError("a wrong output passed")
    except harness.TrialFailure as e:
        assert "max abs error 2 at [6, 1000]" in str(e) and "2 of 8192 elements off" in str(e), str(e)
    out = ref.float().clone()
    out[7, 1023] = float("nan")
    try:
        harness.compare(ctx, out, ref, torch.float32, "normal", "here")
        raise AssertionError("a NaN passed")
    except harness.TrialFailure as e:
        assert "nan at [7, 1023] where the reference is finite" in str(e), str(e)


# Run in a fresh interpreter (Triton's interpreter must be chosen before it is imported): judges the good
# ModelNew in one trial, and a wrong one in a stage, then asks for another problem; prints what is still alive.
ALIVE = r'''
import gc, json, os, sys, weakref
os.environ["TRITON_INTERPRET"] = "1"
import torch
from autokernel.engine import harness, outputs
from autokernel.engine.problem_spec import problem_spec

problem, other, good, wrong = sys.argv[1:5]
spec = problem_spec(problem, "cpu", "small")
seen = []

def watched(fn):
    def call(*args):
        out = fn(*args)
        seen.extend(weakref.ref(t) for t in (*args, out) if isinstance(t, torch.Tensor))
        return out
    return call

report = {}
for name, path in (("good", good), ("wrong", wrong)):
    model_new = harness.bind_candidate(spec, harness.load_candidate(path, "cand_" + name, spec.entry))
    ctx = harness.CheckContext(spec, watched(model_new), "cpu")
    outcome = harness._stage("smoke", lambda: harness.stage_smoke(ctx), spec.entry)
    report[name] = [outcome.status, sum(r() is not None for r in seen), len(seen)]  # no gc: plain references
    del model_new, ctx
kept = weakref.ref(spec)
del spec
problem_spec(other, "cpu", "small")
gc.collect()
report["first_problem_alive"] = kept() is not None
print(json.dumps(report))
'''


def test_nothing_of_a_judged_trial_or_an_earlier_problem_stays_alive(tmp_path):
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "wrong.py").write_text(WRONG)
    other = HERE / "kernelbench_problems" / "level1" / "5_log_softmax.py"
    env = {**os.environ, "AUTOKERNEL_MODEL_SIZE": "small"}
    r = subprocess.run([sys.executable, "-c", ALIVE, str(CUMSUM), str(other), str(tmp_path / "good.py"),
                        str(tmp_path / "wrong.py")], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["good"][0] == "pass" and report["wrong"][0] == "fail", report
    assert report["good"][2] > 0 and report["good"][1] == 0 and report["wrong"][1] == 0, report  # inputs, outputs
    assert report["first_problem_alive"] is False, report  # the worker keeps only the problem it was asked about


def test_an_output_checked_outside_the_stages_keeps_to_the_budget_too(monkeypatch):
    """What the timer's last call is checked by (`harness.judge_output`): on a budget too small for float64
    copies it judges in the inputs' own dtype, says so, and still refuses a wrong output."""
    spec = get_spec("softmax")
    x = torch.randn(8, 1024)
    right = torch.softmax(x, dim=-1)
    monkeypatch.setenv(BUDGET_ENV, str(3 * x.numel() * 4))
    assert harness.judge_output(spec, right, (x,), torch.float32, "cpu").startswith(
        "judged against the reference in the inputs' own dtype, fp32")
    wrong = right.clone()
    wrong[5, 7] += 1e-3
    try:
        harness.judge_output(spec, wrong, (x,), torch.float32, "cpu")
        raise AssertionError("a wrong output passed")
    except harness.TrialFailure as e:
        assert "the timed call: max abs error" in str(e) and "[5, 7]" in str(e), str(e)
    monkeypatch.delenv(BUDGET_ENV)
    assert harness.judge_output(spec, right, (x,), torch.float32, "cpu") == ""  # room: float64, nothing to say


def test_the_kernelbench_check_compares_a_chunk_at_a_time_and_misses_nothing(monkeypatch):
    """model_new's comparison (KernelBench's allclose and the largest error) over chunks finds an error in
    any chunk, a NaN included, as the whole-tensor comparison would."""
    from autokernel.engine.model_new import _error_and_close

    monkeypatch.setattr(outputs, "COMPARE_CHUNK", 64)
    r = torch.linspace(-1, 1, 1000)
    assert _error_and_close(r.clone(), r) == (0.0, True)
    o = r.clone()
    o[700] += 0.5
    err, close = _error_and_close(o, r)
    assert not close and abs(err - 0.5) < 1e-6
    o = r.clone()
    o[999] = float("nan")
    assert _error_and_close(o, r)[1] is False
