"""A whole-problem target whose Model.forward returns several tensors (tests/data/kernelbench_multi: a running
sum and each row's total). The spec, hand-written ModelNew candidates through the real worker (right ones pass
and are timed; the wrong order, a wrong second output, a wrong count or dtype fail, naming the output), the timed
call's check, the KernelBench check of model_new.py, and `autokernel kernelbench --agent MODEL --api-base URL` end
to end against the scripted server: a right ModelNew ends correct, wrong ones end incorrect, naming the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from autokernel.engine import events as ev
from autokernel.engine.integrate import integrate_session_kernels
from autokernel.engine.model_new import _compare
from autokernel.engine.problem_spec import problem_spec
from autokernel.engine.store import Store
from autokernel.engine.timing import check_timed_output
from llm_support import llm_server  # noqa: F401  (a fixture)
from problem_support import GOOD, MULTI, answer

SWAPPED = GOOD.replace("return y, total", "return total, y")
WRONG_TOTAL = GOOD.replace("tl.sum(x, axis=0)", "tl.max(x, axis=0)")  # the row's largest value, not its sum
WRONG = {
    "swapped": (SWAPPED, "draw=1, fp32, output 0: output shape (64,), expected (64, 256)"),
    "wrong_total": (WRONG_TOTAL, "draw=1, fp32, output 1: max abs error"),
    "one_output": (GOOD.replace("return y, total", "return y"),
                   "draw=1, fp32: ModelNew returned Tensor, expected 2 outputs (a tuple of tensors)"),
    "three_outputs": (GOOD.replace("return y, total", "return y, total, total"),
                      "draw=1, fp32: ModelNew returned 3 outputs, expected 2"),
    "wrong_dtype": (GOOD.replace("return y, total", "return y, total.double()"),
                    "draw=1, fp32, output 1: output dtype torch.float64, expected torch.float32"),
}


def test_the_spec_of_a_problem_with_two_outputs(tmp_path):
    spec = problem_spec(MULTI, "cpu", "small")
    (x,) = spec.make_inputs({"draw": 1}, torch.float32, "cpu", torch.Generator().manual_seed(1), "normal")
    y, total = spec.reference(x)
    assert y.shape == (64, 256) and total.shape == (64,) and y.dtype == total.dtype == torch.float32
    wide = spec.reference(x.double())
    assert isinstance(wide, tuple) and [t.dtype for t in wide] == [torch.float64] * 2
    assert torch.allclose(wide[1], x.double().sum(-1))
    assert spec.bytes_moved({}, torch.float32) == (64 * 256 * 2 + 64) * 4  # the input and both outputs
    not_tensors = tmp_path / "not_tensors.py"
    not_tensors.write_text(MULTI.read_text().replace("return y, y.select(self.dim, -1)", "return y, 3"))
    with pytest.raises(ValueError, match="Model.forward returns Tensor, int; a whole-problem target needs a tensor "
                                         "or a tuple of tensors"):
        problem_spec(not_tensors, "cpu", "small")


def test_two_output_candidates_in_the_real_worker(tmp_path):
    from autokernel.engine.worker import Worker

    listed = GOOD.replace("return y, total", "return [y, total]")  # a list is as good as a tuple
    for name, source in {"good": GOOD, "listed": listed, **{k: v[0] for k, v in WRONG.items()}}.items():
        (tmp_path / f"{name}.py").write_text(source)
    with Worker(device="cpu") as w:
        for name in ("good", "listed"):
            report = w.check(str(tmp_path / f"{name}.py"), kernel="problem", problem=str(MULTI), size="small")
            assert report.passed, (name, [(s.name, s.status, s.detail) for s in report.stages])
        (record,) = w.bench(str(tmp_path / "good.py"), kernel="problem", shapes=[{}], dtype="fp32",
                            problem=str(MULTI), size="small")
        assert record.kernel_ms > 0 and record.eager_ms > 0 and not record.meaningful
        for name, (_, reason) in WRONG.items():
            report = w.check(str(tmp_path / f"{name}.py"), kernel="problem", problem=str(MULTI), size="small")
            failed = report.first_failure
            assert failed is not None and failed.name == "smoke" and failed.detail.startswith(reason), (name, failed)


def test_the_timed_call_is_checked_output_by_output():
    spec = problem_spec(MULTI, "cpu", "small")
    args = spec.make_inputs({"draw": 1}, torch.float32, "cpu", torch.Generator().manual_seed(3), "normal")
    y, total = spec.reference(*args)
    check_timed_output(spec, (y, total), args, torch.float32)
    with pytest.raises(RuntimeError, match=r"when timed \(the timed call, output 1: "):
        check_timed_output(spec, (y, total + 1), args, torch.float32)
    with pytest.raises(RuntimeError, match=r"when timed \(the timed call: ModelNew returned 1 outputs, expected 2\)"):
        check_timed_output(spec, [y], args, torch.float32)


def test_the_kernelbench_comparison_names_the_output():
    y, total = torch.randn(4, 8), torch.randn(4)
    assert _compare([y, total], [y.clone(), total.clone()]) == (True, 0.0, "")
    ok, _, why = _compare([y, total], [total, y])
    assert not ok and why == "output 0 (4,) torch.float32, expected (4, 8) torch.float32"
    ok, err, why = _compare([y, total], [y, total + 0.5])
    assert not ok and err == pytest.approx(0.5) and why == "output 1 differs: max abs error 0.5 (atol = rtol = 0.0001)"
    ok, _, why = _compare([y, total], [y])
    assert not ok and why == "ModelNew returned 1 tensors, Model 2"
    assert _compare([y], [y + 1])[2] == "outputs differ: max abs error 1 (atol = rtol = 0.0001)"  # one output: as before


def test_the_kernelbench_tolerance_is_its_current_releases_by_dtype():
    """KernelBench judges float32 outputs at atol = rtol = 1e-4 (a conv kept in float32 where eager's cuDNN ran
    TF32 differs by ~5e-4 and is wrong to it) and half ones at 1e-2."""
    y = torch.randn(64, 64)
    assert _compare([y], [y + 5e-5])[0] and not _compare([y], [y + 5e-4])[0]
    h = y.to(torch.bfloat16)
    assert _compare([h], [h + 0.005])[0] and not _compare([h], [h + 0.05])[0]


def test_model_new_of_a_two_output_problem_is_checked_the_kernelbench_way(tmp_path):
    """The integration subprocess (mode kernelbench) on a kept whole ModelNew: Model's two outputs against
    ModelNew's, trial by trial, named when they differ."""
    def check(source, folder):
        kernel = [{"kind": "problem", "candidate_id": "problem-0001", "source": source, "dtype": "fp32"}]
        return integrate_session_kernels(str(MULTI), "cpu", kernel, tmp_path / folder, mode="kernelbench",
                                         timeout_s=120)

    good = check(GOOD, "good")
    assert good.correct and good.detail.startswith("KernelBench check: 3/3 trials"), good.detail
    bad = check(WRONG_TOTAL, "bad")
    assert not bad.correct and bad.detail.startswith("KernelBench check: 0/3 trials"), bad.detail
    assert "trial 0: output 1 differs: max abs error" in bad.detail


def test_kernelbench_with_an_llm_on_a_problem_with_two_outputs(llm_server, tmp_path):  # noqa: F811
    """`autokernel kernelbench` on three copies of the problem, one experiment each: the server answers a right
    ModelNew for the first (correct, model_new.py returns both outputs), the outputs in the wrong order for the
    second and a wrong total for the third (incorrect, the reason names the output that differs)."""
    folder = tmp_path / "problems"
    folder.mkdir()
    for name in ("1_right", "2_wrong_order", "3_wrong_total"):
        (folder / f"{name}.py").write_text(MULTI.read_text())
    llm_server.play(answer(GOOD, "One program per row"), answer(SWAPPED, "Total first"),
                    answer(WRONG_TOTAL, "Row max as the total"))
    db = tmp_path / "kb.db"
    env = dict(os.environ, OPENAI_API_KEY="sk-test", AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "kernelbench", str(folder),
                           "--agent", "openai/test-model", "--api-base", llm_server.api_base, "--device", "cpu",
                           "--max-experiments-per-problem", "1", "--json", "--db", str(db)],
                          capture_output=True, text=True, timeout=400, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    right, order, total = doc["problems"]
    assert right["status"] == "correct" and right["kernels"] == ["problem"], right
    assert doc["fast_p"]["eager"]["0"] == pytest.approx(1 / 3)
    assert order["status"] == "incorrect" and not order["correct"] and order["model_new"] is None
    assert order["reason"] == ("none of the 1 ModelNew the openai/test-model agent wrote passed the checks; the last "
                               "(problem-0001) failed smoke: fail: draw=1, fp32, output 0: output shape (64,), "
                               "expected (64, 256)")
    assert total["status"] == "incorrect" and "smoke: fail: draw=1, fp32, output 1: max abs error" in total["reason"]
    assert len(llm_server.requests) == 3
    store = Store(db)
    for row in (order, total):  # nothing passed: no ModelNew to check, so no check of the Model against itself
        events = [e for _, e in store.events(row["session_id"])]
        assert not [e for e in events if isinstance(e, ev.IntegrationResult)]
        assert any(isinstance(e, ev.Log) and "no ModelNew passed its checks" in e.message for e in events)
    (integration,) = [e for _, e in store.events(right["session_id"]) if isinstance(e, ev.IntegrationResult)]
    assert integration.correct and integration.detail.startswith("KernelBench check: 3/3 trials")
    # the standalone file returns both outputs, the KernelBench way, in a fresh process
    run = subprocess.run([sys.executable, "-c", (
        "import importlib.util, torch\n"
        f"s = importlib.util.spec_from_file_location('mn', {right['model_new']!r}); m = importlib.util.module_from_spec(s)\n"
        "s.loader.exec_module(m)\nx = m.get_inputs()\n"
        "new, ref = m.ModelNew(*m.get_init_inputs())(*x), m.Model(*m.get_init_inputs())(*x)\n"
        "print(len(new) == 2 and all(torch.allclose(a, b, atol=1e-2) for a, b in zip(new, ref)))\n")],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, AUTOKERNEL_MODEL_SIZE="small"))
    assert run.stdout.strip() == "True", run.stderr[-2000:]
