"""Rows of no kernel type are targets of an ordinary optimize session (issue 17): a model of our own with
nothing of the nine kinds (GELU + scale + cumsum + scale) optimized headless on the CPU with the offline
agent ends with that chain as a target, a correct kept kernel of the tool's own, the model integrated with
it (outputs match, the kernel called), and an exported package that a fresh process imports and uses; a
kernel that computes something else is refused at its site, so the model's outputs never change."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.engine import events as ev
from autokernel.engine.store import Store

MODEL = Path(__file__).parent / "data" / "other_targets" / "gelu_cumsum.py"
# One real session (an Inductor seed, worker and integration subprocesses under Triton's interpreter, the
# integration's torch.compile) behind the first test: minutes on a shared CPU box.
pytestmark = pytest.mark.timeout(900)

USE_EXPORT = """
import sys
import torch
sys.path[:0] = [{pkg_dir!r}, {model_dir!r}]
import {pkg} as pkg
import gelu_cumsum
torch.manual_seed(0)
model = gelu_cumsum.Model().eval()
x = torch.randn(16, 32)
with torch.no_grad():
    want = model(x)
    stats = pkg.patch(model)
    got = model(x)
    again = model(torch.randn(16, 32))
counts = stats.as_list(list(pkg.KERNELS))
print(json.dumps({{"close": bool(torch.allclose(got, want, atol=1e-5, rtol=1e-5)), "counts": counts}}))
"""


def _cli(args: list[str], env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autokernel.engine.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def _use_export(package: Path, env: dict) -> dict:
    code = "import json\n" + USE_EXPORT.format(pkg_dir=str(package.parent), model_dir=str(MODEL.parent),
                                               pkg=package.name)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """One headless session on the model (the offline agent, two experiments) and its export."""
    tmp = tmp_path_factory.mktemp("other_targets")
    env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp / "cache"))
    db = tmp / "sessions.db"
    run = _cli(["optimize", str(MODEL), "--headless", "--device", "cpu", "--max-experiments", "2", "--db", str(db)],
               env)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    store = Store(db)
    sid = store.session("latest", kind="optimize")["id"]
    events = [e for _, e in store.events(sid)]
    package = tmp / "gelu_kernels"
    exported = _cli(["export", sid, "-o", str(package), "--db", str(db)], env, timeout=300)
    assert exported.returncode == 0, exported.stderr[-2000:]
    return events, package, env, run.stdout, (db, sid)


def test_the_chain_of_no_kernel_type_is_a_target_with_a_kept_kernel(optimized):
    events, _, _, stdout, _ = optimized
    assert "no kernel spec" not in stdout
    started = [e for e in events if isinstance(e, ev.TargetStarted)]
    assert [t.target for t in started] == ["sub_gelu_mul_cumsum_mul"], stdout[-2000:]
    profile = next(e for e in events if isinstance(e, ev.ProfileReady))
    assert profile.rows[started[0].row]["kind"] == "other"
    written = {e.candidate_id: e for e in events if isinstance(e, ev.CandidateWritten)}
    kept = [e for e in events if isinstance(e, ev.Decision) and e.decision == "kept"]
    assert kept and all(written[d.candidate_id].target == "sub_gelu_mul_cumsum_mul" for d in kept)
    starter = written[kept[0].candidate_id]
    assert starter.label == "Inductor seed" and "@triton.jit" in starter.source and starter.params
    stages = [e for e in events if isinstance(e, ev.StageResult) and e.candidate_id == starter.candidate_id
              and e.status not in ("running", "pending")]
    assert stages and all(s.status in ("pass", "skipped") for s in stages)
    done = next(e for e in events if isinstance(e, ev.TargetDone))
    assert done.best_candidate_id in {d.candidate_id for d in kept}


def test_the_model_runs_the_kernel_and_its_outputs_match(optimized):
    events, _, _, _, _ = optimized
    result = next(e for e in events if isinstance(e, ev.IntegrationResult))
    assert result.correct, result.detail
    (swapped,) = result.replaced
    assert swapped["kind"] == "sub_gelu_mul_cumsum_mul" and swapped["calls"] >= 1 and not swapped["mismatches"]
    assert "kernels used: sub_gelu_mul_cumsum_mul" in result.detail


def test_the_export_is_importable_and_patches_a_fresh_model(optimized):
    _, package, env, _, _ = optimized
    assert (package / "subgraph_patch.py").exists()
    used = _use_export(package, env)
    assert used["close"]
    (count,) = used["counts"]
    assert count["calls"] >= 2 and not count["mismatches"]  # the kernel ran, at both inputs


def test_a_kernel_that_computes_something_else_is_refused_at_its_site(optimized, tmp_path):
    _, package, env, _, _ = optimized
    broken = tmp_path / "broken_kernels"
    subprocess.run(["cp", "-r", str(package), str(broken)], check=True)
    kernel = broken / "sub_gelu_mul_cumsum_mul.py"
    source = kernel.read_text()
    wrong = re.sub(r"tl\.store\(([^,]+), (\w+),", r"tl.store(\1, \2 * 2.0 + 1.0,", source, count=1)
    assert wrong != source
    kernel.write_text(wrong)
    used = _use_export(broken, env)
    assert used["close"]  # the model's outputs are PyTorch's where the kernel disagrees
    (count,) = used["counts"]
    assert count["mismatches"] and count["calls"] == 0


def test_the_bottleneck_table_shows_the_target_on_its_row(optimized):
    from autokernel.engine.session_state import fold

    events, _, _, _, _ = optimized
    state = fold(events)
    target = state.targets["sub_gelu_mul_cumsum_mul"]
    row = state.rows[target.row]
    assert row.kind == "other" and row.status == target.done and row.best_speedup == target.best_speedup
    assert row.best_speedup is not None


def test_a_resumed_session_goes_on_with_the_same_problem_and_seed(optimized):
    events, _, env, _, (db, sid) = optimized
    before = [e for e in events if isinstance(e, ev.CandidateWritten)]
    run = _cli(["optimize", "--resume", sid, "--headless", "--max-experiments", "3", "--db", str(db)], env)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    after = [e for _, e in Store(db).events(sid)]
    logs = [e.message for e in after if isinstance(e, ev.Log)]
    assert sum("asking Inductor for a seed" in m for m in logs) == 1  # planned and seeded once, in the first run
    assert sum("is target sub_gelu_mul_cumsum_mul" in m for m in logs) == 1
    written = [e for e in after if isinstance(e, ev.CandidateWritten)]
    assert len(written) == len(before) + 1 and written[-1].target == "sub_gelu_mul_cumsum_mul"
    assert [e.target for e in after if isinstance(e, ev.TargetStarted)] == ["sub_gelu_mul_cumsum_mul"]


def test_an_experiment_cut_at_the_cap_on_a_subgraph_target_is_finished_on_resume(optimized, tmp_path):
    """The budget is spent, but the subgraph target holding the cut experiment is still reached: the resume
    plans the subgraphs again to find it, finishes the experiment and starts nothing new."""
    import shutil
    import sqlite3

    events, _, env, _, (db, sid) = optimized
    cut = [e for e in events if isinstance(e, ev.CandidateWritten)][-1]
    assert cut.target == "sub_gelu_mul_cumsum_mul" and cut.experiment == 2
    copy = tmp_path / "cut.db"
    shutil.copy(db, copy)
    store = Store(copy)
    first_stage = next(s for s, e in store.events(sid) if isinstance(e, ev.StageResult) and e.candidate_id == cut.candidate_id)
    with sqlite3.connect(copy) as conn:  # the store as a SIGKILL mid-experiment leaves it
        conn.execute("DELETE FROM events WHERE session_id = ? AND seq > ?", (sid, first_stage))
        conn.execute("UPDATE sessions SET status = 'interrupted', summary = NULL WHERE id = ?", (sid,))
    run = _cli(["optimize", "--resume", sid, "--headless", "--max-experiments", "2", "--no-integrate", "--db", str(copy)],
               env)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    after = [e for _, e in Store(copy).events(sid)]
    assert [e.experiment for e in after if isinstance(e, ev.CandidateWritten)] == [1, 2]
    assert sum(1 for e in after if isinstance(e, ev.Decision) and e.candidate_id == cut.candidate_id) == 1


def test_planning_grows_rows_into_chains_no_two_targets_share_a_node(tmp_path):
    """The mixed model's real profile: rows of no kernel type become problems (at most the CPU's bound), none
    holding an operator of a kernel-type row or a node of another target; the plan is read back, not redone."""
    from autokernel.engine import subgraph_targets
    from autokernel.engine.model_loading import load_model
    from autokernel.engine.profiling import profile_model
    from autokernel.engine.session import dtype_name, plan_targets, row_dict

    mixed = Path(__file__).parent / "data" / "subgraph" / "mixed_model.py"
    rows = [row_dict(r) for r in profile_model(load_model(mixed, "cpu"), warmup=1, iters=2).rows]
    others: list[int] = []
    known = plan_targets(rows, "triton", lambda m: None, "cpu", others)
    assert others and all(rows[i]["kind"] == "other" for i in others) and known
    lines: list[str] = []
    plan = subgraph_targets.plan_subgraphs(str(mixed), "cpu", None, rows, others, tmp_path, lines.append, dtype_name)
    assert 1 <= len(plan) <= subgraph_targets.MAX_TARGETS["cpu"], lines
    known_ops = {r["name"] for r in rows if r["kind"] != "other"}
    nodes = [set(p["nodes"].split("+")) for p in plan]
    for p, members in zip(plan, nodes):
        assert p["kind"].startswith("sub_") and p["kind"].isidentifier() and p["row"] in others
        source = Path(p["problem"]).read_text()
        assert "SUBGRAPH = " in source and "def kernel_fn(" in source
        assert not known_ops & set(re.findall(r"aten::\w+", source.split('"""')[1]))
        assert all(not members & other for other in nodes if other is not members)
    again = subgraph_targets.plan_subgraphs("no such model", "cpu", None, rows, others, tmp_path, lines.append,
                                            dtype_name)
    assert again == plan
