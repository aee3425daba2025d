"""KernelBench mode: problem discovery, the fast_p arithmetic, the ModelNew check, and whole batches
through the real CLI (real profiler, worker, playbook agent, Triton's interpreter) on our own problem
files in KernelBench form (tests/kernelbench_problems; no KernelBench file is copied here)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.errors import UserError
from autokernel.engine.integrate import integrate_session_kernels
from autokernel.engine.kernelbench import ProblemResult, discover, fast_p, result_from_session
from autokernel.engine.model_new import CHECK_DONE
from autokernel.engine.store import Store

from autokernel.engine.static_check import static_problems

from loop_doubles import PROBLEM_SRC
from problem_support import load_like_kernelbench

PROBLEMS = Path(__file__).parent / "kernelbench_problems"
SOFTMAX = PROBLEMS / "level1" / "1_softmax.py"
CUMSUM = PROBLEMS / "level1" / "4_cumsum.py"
UNSEEDABLE = Path(__file__).parent / "data" / "kernelbench_unseedable" / "1_inverse.py"  # Inductor cannot seed it
WHOLE = {"level1/4_cumsum": "cumsum", "level1/5_log_softmax": "log_softmax", "level2/6_conv_bias_relu": "relu"}
RMSNORM = PROBLEMS / "level1" / "2_rmsnorm.py"
# problems of a known kernel type -> the kernel ModelNew must run (reduce and a LayerNorm over three dims: issue 25)
KNOWN = {"level1/1_softmax": "softmax", "level1/2_rmsnorm": "rmsnorm", "level1/3_row_sum": "reduce",
         "level1/6_layernorm_3d": "layernorm", "level2/3_gemm_relu": "matmul"}
NAMES = ["level1/1_softmax", "level1/2_rmsnorm", "level1/3_row_sum", "level1/4_cumsum", "level1/5_log_softmax",
         "level1/6_layernorm_3d", "level2/3_gemm_relu", "level2/6_conv_bias_relu"]
BROKEN = "import torch\nraise RuntimeError('boom at import')\nclass Model: pass\ndef get_inputs():\n    return []\n"


def _cli(*args, timeout=400, **kw):
    return subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "kernelbench", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, **kw)


# eight problems under Triton's interpreter on a shared two-core box
BATCH_TIMEOUT = pytest.mark.timeout(1500)
# Experiments per problem in the batch fixture: each problem's first kept kernel (a starter, or Inductor's seed
# of a problem of no known type) is what its rows and ModelNews assert; the playbook tuning a seed past it is
# tests/test_other_targets.py's.
BATCH_EXPERIMENTS = 1


# -- fast_p --------------------------------------------------------------------------------------
def _r(status, eager=None, compile_=None):
    return ProblemResult(name=status, path="", status=status, speedup_eager=eager, speedup_compile=compile_)


def test_fast_p_counts_every_problem_and_needs_more_than_p():
    results = [_r("correct", 2.5, 1.2), _r("correct", 1.0, 0.5), _r("correct", 1.6, 2.0),
               _r("incorrect", 3.0, 3.0), _r("skipped"), _r("error")]
    score = fast_p(results)
    assert score["eager"] == {"0": 3 / 6, "1.0": 2 / 6, "1.5": 2 / 6, "2.0": 1 / 6}  # 1.0x is not faster than 1.0
    assert score["compile"] == {"0": 3 / 6, "1.0": 2 / 6, "1.5": 1 / 6, "2.0": 0.0}  # 2.0x is not more than 2.0
    assert fast_p([]) == {b: {"0": 0.0, "1.0": 0.0, "1.5": 0.0, "2.0": 0.0} for b in ("eager", "compile")}
    # correct problems never timed against torch.compile (a CPU run): not measured, not zero
    cpu = fast_p([_r("correct", 0.5), _r("skipped")])
    assert cpu["compile"] == {"0": 0.5, "1.0": None, "1.5": None, "2.0": None}
    assert cpu["eager"] == {"0": 0.5, "1.0": 0.0, "1.5": 0.0, "2.0": 0.0}
    assert fast_p([_r("skipped")])["compile"]["1.0"] == 0.0  # nothing correct: nothing fast, measured or not


def test_a_win_within_the_noise_margin_is_counted_and_named_a_tie():
    import io

    from autokernel.engine.commands.kernelbench import print_report
    from autokernel.engine.kernelbench import ties

    rows = [_r("correct", 1.0025, 0.99), _r("correct", 1.02, 1.021), _r("correct", 1.5, 1.01),
            _r("incorrect", 1.01, 1.01), _r("correct", 1.0, 1.0)]
    assert fast_p(rows)["eager"]["1.0"] == 3 / 5  # KernelBench's rule: any speedup above 1
    assert ties(rows) == {"eager": 2, "compile": 1}  # 1.0025 and 1.02 (the margin itself); 1.01 vs compile
    report = {"problems": [r.to_json() for r in rows], "fast_p": fast_p(rows), "fast_1_ties": ties(rows),
              "counted": 5, "total": 5, "complete": True, "meaningful": True, "device": "cuda", "agent": "playbook"}
    out = io.StringIO()
    print_report(report, out)
    text = " ".join(out.getvalue().split())
    assert "2 against eager and 1 against torch.compile are faster by 2% or less: ties" in text, text
    out = io.StringIO()
    print_report({**report, "meaningful": False}, out)  # CPU timings mean nothing: no tie to name
    assert "ties" not in out.getvalue()


# -- a problem's row -----------------------------------------------------------------------------
def _ended(status, events, api_base=None):
    """A finished session as `result_from_session` reads it (its state folded from `events`)."""
    from types import SimpleNamespace

    from autokernel.engine.search_state import SearchState
    from autokernel.engine.session import SessionConfig

    return SimpleNamespace(state=SearchState.from_events("s1", events), summary={"status": status},
                           session_id="s1", config=SessionConfig(api_base=api_base), store=None)


def test_a_row_names_what_a_resume_needs_and_an_unsolved_whole_problem_is_incorrect():
    from autokernel.engine.kernelbench import Problem, result_from_session

    problem = Problem("p", CUMSUM)
    stopped = result_from_session(problem, _ended("stopped", [], api_base="http://127.0.0.1:8000/v1"), "m", 1.0)
    assert stopped.status == "stopped" and stopped.reason.endswith("--resume s1 --api-base URL")
    assert result_from_session(problem, _ended("stopped", []), "m", 1.0).reason.endswith("--resume s1")
    # the LLM agent took the problem whole and wrote nothing that ran: no solution, not the Model as one
    started = ev.TargetStarted(target="problem", shape={}, dtype="fp32")
    done = ev.TargetDone(target="problem", reason="exhausted")
    row = result_from_session(problem, _ended("completed", [started, done]), "openai/m", 1.0)
    assert row.status == "incorrect" and not row.correct
    assert row.reason == "the openai/m agent wrote no ModelNew (the search ended: exhausted)"


# -- discovery -----------------------------------------------------------------------------------
def test_discovery_finds_problems_in_nested_level_folders_and_ignores_other_files(tmp_path):
    for rel in ("level1/2_b.py", "level1/10_a.py", "level2/deep/1_c.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(PROBLEM_SRC)
    (tmp_path / "level1" / "helpers.py").write_text("def get_inputs():\n    return []\n")  # no Model
    (tmp_path / "level1" / "__init__.py").write_text(PROBLEM_SRC)
    (tmp_path / "level1" / "3_broken.py").write_text("class Model(\ndef get_inputs(:\n")  # unparsable: still a problem
    (tmp_path / "notes.txt").write_text("class Model\nget_inputs")
    problems, ignored = discover([tmp_path])
    assert [p.name for p in problems] == ["level1/2_b", "level1/3_broken", "level1/10_a", "level2/deep/1_c"]
    assert [f.name for f in ignored] == ["helpers.py"]
    # a file named on its own is a problem whatever it holds (the run says why it is skipped); no duplicates
    problems, _ = discover([tmp_path / "level1" / "helpers.py", tmp_path / "level2", tmp_path / "level2" / "deep" / "1_c.py"])
    assert [p.name for p in problems] == ["helpers", "deep/1_c"]
    with pytest.raises(UserError, match="no such file"):
        discover([tmp_path / "missing"])
    with pytest.raises(UserError, match="not a Python file"):
        discover([tmp_path / "notes.txt"])


def test_our_problem_folder_holds_the_eight_problems():
    assert [p.name for p in discover([PROBLEMS])[0]] == NAMES


# -- the ModelNew check (the integration subprocess in mode kernelbench) --------------------------
CACHING_SOFTMAX = '''
import torch
_seen = []


def kernel_fn(x):
    # right on the first input it sees, wrong on every later one: only fresh inputs catch it
    _seen.append(1)
    return torch.softmax(x, dim=-1) if len(_seen) == 1 else torch.zeros_like(x)
'''


def test_model_new_is_checked_on_fresh_inputs_and_runs_on_its_own(tmp_path):
    kernel = [{"kind": "softmax", "candidate_id": "softmax-0003", "source": CACHING_SOFTMAX, "dtype": "fp32"}]
    bad = integrate_session_kernels(str(SOFTMAX), "cpu", kernel, tmp_path / "bad", mode="kernelbench", timeout_s=120)
    assert not bad.correct and bad.detail.startswith("KernelBench check: 1/3 trials")
    assert "trial 1: outputs differ" in bad.detail and not bad.meaningful and bad.compile_ms is None
    assert bad.replaced[0]["candidate_id"] == "softmax-0003"

    same = integrate_session_kernels(str(SOFTMAX), "cpu", [], tmp_path / "same", mode="kernelbench", timeout_s=120)
    assert same.correct and same.detail.startswith("KernelBench check: 3/3 trials"), same.detail
    assert "ModelNew is the problem's Model unchanged" in same.detail
    assert same.max_abs_error == 0.0 and same.model_ms > 0 and same.eager_ms > 0
    # where the check's time went: each phase named with its seconds (their values are for benchmarks to read)
    assert list(same.phase_seconds) == ["load", "trials", "compile", "timing", "process"], same.phase_seconds
    # the file that was checked is a KernelBench solution a user can import and run as it is
    model_new = tmp_path / "same" / "model_new.py"
    spec = importlib.util.spec_from_file_location("kb_model_new_test", model_new)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.ModelNew(*module.get_init_inputs())(*module.get_inputs())
    assert out.shape == (64, 256) and "No kernel was kept" in model_new.read_text()


def test_a_model_new_that_is_the_original_model_is_1x_eager_and_counted_apart(tmp_path):
    """Seen on the H100: a gemm problem whose matmul was not swapped in (not faster than eager) scored
    1.00003x eager from two timings of the same code, and counted in fast_1.0; on the H200 (run 32)
    KernelBench's static checker refused such a file ("Missing @triton.jit"), so it is no submission."""
    from types import SimpleNamespace

    check = ev.IntegrationResult(correct=True, detail=f"{CHECK_DONE} 3/3 trials", model_ms=2.74563, eager_ms=2.74571,
                                 compile_ms=2.74394, speedup_eager=1.00003, speedup_compile=0.99938,
                                 replaced=[{"kind": "matmul", "calls": 0}])
    session = SimpleNamespace(session_id="s1", summary={"status": "completed", "experiments": 5}, config=None,
                              state=SimpleNamespace(targets={"matmul": SimpleNamespace(best=None)}, integration=check))
    problem = SimpleNamespace(name="level2/3_gemm_relu", path=tmp_path / "3_gemm_relu.py")
    r = result_from_session(problem, session, "playbook", 1.0)
    assert r.status == "no-kernel" and not r.correct and r.kernels == [] and "ModelNew is the original Model" in r.reason
    assert r.speedup_eager == 1.0 and r.model_ms == check.eager_ms
    assert r.speedup_compile == pytest.approx(2.74394 / 2.74571)
    # Not a submission (KernelBench's static checker refuses a file with no kernel): not even fast_0.
    assert fast_p([r])["eager"] == {"0": 0.0, "1.0": 0.0, "1.5": 0.0, "2.0": 0.0}


# -- whole batches through the real CLI ------------------------------------------------------------
@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Our problem folder (five problems of known kernel types, three of none: Inductor's seed of those is
    their candidate), once, as JSON."""
    db = tmp_path_factory.mktemp("kernelbench") / "s.db"
    p = _cli(PROBLEMS, "--device", "cpu", "--max-experiments-per-problem", BATCH_EXPERIMENTS, "--db", db, "--json",
             timeout=1400)
    return p, db


@BATCH_TIMEOUT
def test_batch_json_document(batch):
    p, _ = batch
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)  # stdout is one JSON document; progress went to stderr
    assert set(doc) >= {"problems", "fast_p", "device", "meaningful", "complete", "batch_session", "command"}
    assert doc["device"] == "cpu" and doc["complete"] and not doc["meaningful"]
    by_name = {r["name"]: r for r in doc["problems"]}
    assert list(by_name) == NAMES
    for name, kind in KNOWN.items():
        r = by_name[name]
        assert r["status"] == "correct" and r["correct"], r
        assert r["kernels"] == [kind] and r["experiments"] == BATCH_EXPERIMENTS  # ModelNew ran the searched kernel
        assert r["speedup_eager"] > 0 and r["speedup_compile"] is None and not r["meaningful"]
        assert Path(r["model_new"]).name == "model_new.py" and "class ModelNew(Model)" in Path(r["model_new"]).read_text()
        assert not (Path(r["model_new"]).parent / "_patch.py").exists()  # nothing beside it is loaded
    for name, op in WHOLE.items():  # no kernel type: the whole ModelNew, from Inductor's seed, checked and kept
        r = by_name[name]
        assert r["status"] == "correct" and r["correct"] and r["kernels"] == ["problem"], r
        assert r["experiments"] == BATCH_EXPERIMENTS and r["speedup_eager"] > 0 and not r["meaningful"]
        source = Path(r["model_new"]).read_text()
        assert "@triton.jit" in source and "class ModelNew(Model)" in source and op in source
        # self-contained (issue 25): the problem's source is in the file, nothing is loaded from a path
        assert str(Path(r["path"]).parent) not in source and "spec_from_file_location" not in source
    assert doc["fast_p"]["compile"] == {"0": 1.0, "1.0": None, "1.5": None, "2.0": None}  # not timed on a CPU
    assert doc["fast_p"]["eager"] == {key: sum(r["correct"] and r["speedup_eager"] > p for r in doc["problems"]) / 8
                                      for key, p in (("0", 0), ("1.0", 1.0), ("1.5", 1.5), ("2.0", 2.0))}
    assert doc["fast_p"]["eager"]["0"] == 1.0
    assert "[8/8] level2/6_conv_bias_relu: correct" in p.stderr


@BATCH_TIMEOUT
def test_each_problem_is_a_session_in_the_store(batch):
    p, db = batch
    doc = json.loads(p.stdout)
    store = Store(db)
    for r in doc["problems"]:
        row = store.session(r["session_id"])
        assert row["kind"] == "optimize" and row["status"] == "completed" and row["model"] == r["path"]
        assert row["config"]["integration"] == "kernelbench"
        checks = [e for _, e in store.events(row["id"]) if isinstance(e, ev.IntegrationResult)]
        assert len(checks) == (0 if r["status"] == "skipped" else 1)
        if checks:
            assert checks[0].correct and f"ModelNew: {r['model_new']}" in checks[0].detail
    row = store.session(doc["batch_session"])
    assert row["kind"] == "kernelbench" and row["status"] == "completed"
    assert row["summary"]["fast_p"] == doc["fast_p"] and len(row["config"]["problems"]) == 8


@BATCH_TIMEOUT
def test_every_model_new_runs_alone_the_kernelbench_way(batch):
    """Issue 25: every model_new.py of the batch, loaded as KernelBench loads a Triton submission (a temporary
    file imported from an empty folder, nothing beside it), builds, matches Model on fresh inputs, routes its
    calls to the kept kernel (the patch's count, not "no call matched"), and passes the static check."""
    p, _ = batch
    for r in json.loads(p.stdout)["problems"]:
        text = Path(r["model_new"]).read_text()
        assert static_problems(text, ["triton"]) == [], r["name"]
        assert "__file__" not in text and str(Path(r["path"]).parent) not in text, r["name"]
        result = load_like_kernelbench(Path(r["path"]), Path(r["model_new"]))
        assert result["matched"] == result["trials"], (r["name"], result)
        if r["name"] in KNOWN:
            assert result["calls"].get(KNOWN[r["name"]], 0) > 0, (r["name"], result)


def _wait_for_a_candidate_of(problem: Path, db: Path, proc: subprocess.Popen, timeout_s: float = 180) -> None:
    """Until the optimize session of `problem` in `db` has written its first candidate (its loop is running)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        store = Store(db)
        for s in store.sessions(kind="optimize"):
            if s["model"].endswith(problem.name) and any(isinstance(e, ev.CandidateWritten) for _, e in store.events(s["id"])):
                return
        time.sleep(0.1)
    raise AssertionError(f"the session of {problem.name} never wrote a candidate")


def test_table_skips_a_broken_file_and_ctrl_c_stops_cleanly(tmp_path):
    """Without --json: the rich table. A file that fails to import is skipped with its reason; Ctrl-C
    during the last problem stops its session (resumable), prints what finished and exits 130."""
    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN)
    db = tmp_path / "s.db"
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "autokernel.engine.cli", "kernelbench", str(SOFTMAX), str(broken),
                             str(UNSEEDABLE), str(RMSNORM), "--device", "cpu", "--max-experiments-per-problem", "2",
                             "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("[4/4] 2_rmsnorm: optimizing"):
                break
        _wait_for_a_candidate_of(RMSNORM, db, proc)  # inside the last problem's loop, not before or after it
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines) + err
    assert proc.returncode == 130, err[-3000:]
    assert "[2/4] broken: skipped — the problem does not load: broken.py: line 2: RuntimeError: boom at import" in err
    rows = {}  # problem -> [status, vs eager, vs compile, kernels, session, note (wrapped lines joined)]
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 7 and cells[0]:
            rows[cells[0]] = cells[1:]
        elif len(cells) == 7 and rows:
            rows[list(rows)[-1]][5] += " " + cells[6]
    assert list(rows) == ["1_softmax", "broken", "1_inverse", "2_rmsnorm"], out
    assert rows["1_softmax"][0] == "correct" and rows["1_softmax"][1].endswith("x (cpu)") and rows["1_softmax"][3] == "softmax"
    assert rows["broken"][0] == "skipped" and "does not load" in rows["broken"][5]
    assert rows["1_inverse"][:4] == ["skipped", "—", "—", "—"], rows["1_inverse"]
    assert "Inductor could not seed it" in rows["1_inverse"][5] and "linalg_inv" in rows["1_inverse"][5]
    assert rows["2_rmsnorm"][0] == "stopped" and "--resume" in rows["2_rmsnorm"][5]
    assert "fast_p" in out and "of the 3 problems counted" in out and "not meaningful" in out
    assert "stopped: 3 of 4 problems finished" in out
    store = Store(db)
    stopped = store.session(rows["2_rmsnorm"][4])
    assert stopped["status"] == "stopped" and stopped["kind"] == "optimize"  # resumable with autokernel optimize
    batch_row = next(s for s in store.sessions(kind="kernelbench"))
    assert batch_row["status"] == "stopped" and not batch_row["summary"]["complete"]


def test_a_seed_inductor_cannot_make_is_one_line_and_no_file(tmp_path):
    """The engine's side of seeding: a crash in the seed subprocess (here the problem's own, at import) comes
    back as its last line; Inductor's refusal (UNSEEDABLE) is covered through the CLI below."""
    from autokernel.engine.seeding import seed_problem

    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN)
    path, reason = seed_problem(broken, tmp_path / "seed.py")
    assert path is None and "boom at import" in reason and "\n" not in reason, reason
    assert not (tmp_path / "seed.py").exists()


def test_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, message in (([tmp_path / "nope"], "no such file or folder"),
                          ([tmp_path / "empty"], "no problem files under"),
                          ([SOFTMAX, "--max-experiments-per-problem", "0"], "must be a positive number")):
        p = _cli(*args, "--device", "cpu", "--db", tmp_path / "s.db")
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
