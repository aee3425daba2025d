"""The five-stage harness against deliberately bad candidates: each fails at the right stage with
the right reason, and the worker (or its replacement) goes on to pass a good candidate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.engine import coverage
from autokernel.engine.results import STAGES, CheckReport, StageOutcome
from autokernel.engine.worker import Worker
from autokernel.kernels import get_spec

BAD = Path(__file__).parent / "bad_candidates"
SOFTMAX_STARTER = str(get_spec("softmax").starters["triton"])

# candidate -> (stage it must fail at, status, words the reason must contain)
EXPECTED = {
    "syntax_error.py": ("smoke", "fail", "SyntaxError"),
    "no_kernel_fn.py": ("smoke", "fail", "defines no kernel_fn"),
    "calls_reference.py": ("smoke", "fail", "calls the reference op aten::_softmax"),
    "torch_math.py": ("smoke", "fail", "instead of"),
    "mutates_input.py": ("smoke", "fail", "modified its input argument 0"),
    "noise.py": ("smoke", "fail", "max abs error"),
    "unwritten_output.py": ("smoke", "fail", ""),
    "result_cache.py": ("shape_sweep", "fail", "max abs error"),
    "wrong_tail.py": ("shape_sweep", "fail", "max abs error"),
    "no_max_subtraction.py": ("stability", "fail", "large inputs"),
    "nondeterministic.py": ("determinism", "fail", "differs from run 1"),
    "assumes_strides.py": ("edge_cases", "fail", "non-contiguous"),
    "crash.py": ("smoke", "crash", "SIGSEGV"),
    "exits.py": ("smoke", "crash", "exited with status 3"),
}


@pytest.fixture(scope="module")
def worker():
    w = Worker(device="cpu")
    yield w
    w.close()


def _first_failure(report):
    return next(s for s in report.stages if s.status not in ("pass", "skipped"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_candidate_fails_at_the_right_stage(worker, name):
    stage, status, words = EXPECTED[name]
    seen = []
    report = worker.check(str(BAD / name), kernel="softmax", on_stage=lambda *a: seen.append(a[:2]))
    assert not report.passed
    bad = _first_failure(report)
    assert (bad.name, bad.status) == (stage, status), f"{name}: {bad}"
    assert words in bad.detail, f"{name}: {bad.detail}"
    # stages before it passed, stages after it were skipped, and progress was reported live
    names = [s.name for s in report.stages]
    assert names == list(STAGES)
    i = names.index(stage)
    assert all(s.status == "pass" for s in report.stages[:i])
    assert all(s.status == "skipped" for s in report.stages[i + 1:])
    assert (stage, status) in seen


def test_worker_survives_everything_and_passes_the_starter(worker):
    for name in ("crash.py", "exits.py"):
        worker.check(str(BAD / name), kernel="softmax")
    report = worker.check(SOFTMAX_STARTER, kernel="softmax")
    assert report.passed, report.first_failure
    assert worker.restarts >= 2


def test_candidate_that_patches_torch_is_rejected(worker):
    report = worker.check(str(BAD / "patches_torch.py"), kernel="softmax")
    assert not report.passed
    assert "torch.softmax" in report.error
    assert worker.check(SOFTMAX_STARTER, kernel="softmax").passed  # a fresh, untouched worker


def test_hang_times_out_and_the_next_candidate_runs():
    with Worker(device="cpu", stage_timeout=5, load_timeout=8) as w:
        report = w.check(str(BAD / "hang.py"), kernel="softmax")
        bad = _first_failure(report)
        assert (bad.name, bad.status) == ("smoke", "timeout") and "killed the worker" in bad.detail
        assert w.check(str(BAD / "no_kernel_fn.py"), kernel="softmax").stages[0].status == "fail"


def test_rmsnorm_starter_passes_and_times(worker):
    path = str(get_spec("rmsnorm").starters["triton"])
    assert worker.check(path, kernel="rmsnorm").passed
    (rec,) = worker.bench(path, kernel="rmsnorm", shapes=[{"rows": 16, "cols": 256}], dtype="fp32")
    assert rec.meaningful is False and rec.kernel_ms > 0 and rec.eager_ms > 0 and rec.metric == "GB/s"
    assert rec.compile_ms is None and "not timed on CPU" in rec.note
    assert rec.copy_gbs is None  # the size-matched copy is a GPU measurement
    # no wall-clock batches on CPU: nothing to choose between, so nothing said about how it was timed
    assert rec.timed_by == "" and rec.timing_reason == "" and rec.kernel_wall_ms is None and rec.eager_wall_ms is None


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "autokernel.engine.cli", *args], capture_output=True, text=True, timeout=600)


def test_check_cli_exit_codes_and_json():
    ok = _cli("check", "--kernel", "softmax", "--device", "cpu", "--json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["passed"] is True and [s["name"] for s in doc["stages"]] == list(STAGES)
    assert all({"name", "passed", "detail"} <= set(s) for s in doc["stages"])
    # the interpreter ran the wide rows only cut down to one row: the verdict says so, never "all five"
    wide = {"shape": {"rows": 4096, "cols": 50257}, "checked_as": {"rows": 1, "cols": 50257}}
    assert wide in doc["skipped_shapes"] and "all five" not in doc["coverage"]
    assert "rows=4096,cols=50257 as rows=1" in doc["stages"][1]["detail"]
    bad = _cli("check", str(BAD / "noise.py"), "--kernel", "softmax", "--device", "cpu", "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["passed"] is False
    unknown = _cli("check", "--kernel", "nope", "--device", "cpu")
    assert unknown.returncode == 2 and "unknown kernel" in unknown.stderr and "Traceback" not in unknown.stderr
    missing = _cli("check", "missing.py", "--kernel", "softmax", "--device", "cpu")
    assert missing.returncode == 2 and "missing.py" in missing.stderr


def test_check_never_claims_all_five_stages_for_a_bug_only_wide_rows_reach():
    """The softmax starter with a x1.01 bug on its path for rows above 32768 columns (issue 20): no sweep
    shape that reaches it fits the interpreter at full size, so a check that skipped them passed it."""
    r = _cli("check", str(BAD / "wide_row_bug.py"), "--kernel", "softmax", "--device", "cpu")
    assert "all five stages" not in r.stdout + r.stderr
    assert r.returncode == 1 and "FAILED" in r.stdout, r.stdout + r.stderr
    assert "cols=50257" in r.stderr and "max abs error" in r.stderr  # caught on the one-row stand-in


def test_a_pass_with_shapes_not_run_names_them_and_what_ran_instead():
    def fits(shape):
        return shape["rows"] * shape["cols"] <= 70_000

    run, unrun = coverage.plan([{"rows": 4, "cols": 64}, {"rows": 4096, "cols": 50257}, {"rows": 2, "cols": 99999},
                                {"rows": 1024, "cols": 32000}, {"rows": 4, "cols": 32000}], ("rows",), fits)
    assert run == [{"rows": 4, "cols": 64}, {"rows": 1, "cols": 50257}, {"rows": 2, "cols": 32000}]
    assert unrun[1] == {"shape": {"rows": 2, "cols": 99999}, "checked_as": None}
    report = CheckReport("softmax", "triton", "cpu", "c.py",
                         stages=[StageOutcome(s, "pass") for s in STAGES], skipped_shapes=unrun, shapes_total=9)
    assert report.passed and "all five" not in report.coverage()
    assert report.coverage().startswith("the five stages on 5 of 9 shapes at full size")
    assert "rows=4096,cols=50257 as rows=1" in report.coverage()
    assert "not checked: rows=2,cols=99999" in report.coverage() and "run on a GPU" in report.coverage()
    assert CheckReport("softmax", "triton", "cuda", "c.py").coverage() == "all five stages"
