"""scripts/multigpu_bench.py `fixed`: the pool alone, on a fixed list of candidates (no search path to differ
between a one-worker and an N-worker run)."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from loop_doubles import FakeWorker, fake_source  # noqa: E402
from multigpu_bench import fixed_candidates, fixed_pool_run  # noqa: E402

from autokernel.kernels import get_spec  # noqa: E402


def test_the_candidates_are_the_starter_with_one_knob_moved():
    starter = get_spec("rmsnorm").starters["triton"].read_text()
    candidates = fixed_candidates("rmsnorm", 5)
    assert len(candidates) == 5 and len({s for _, s in candidates}) == 5
    for label, source in candidates:
        changed = [ln for ln in difflib.unified_diff(starter.splitlines(), source.splitlines(), lineterm="", n=0)
                   if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        assert len(changed) == 2 and changed[1].startswith("+" + label.split("=")[0].upper())


def test_every_candidate_runs_once_and_both_workers_take_some(tmp_path):
    workers = [FakeWorker(delay_s=0.2), FakeWorker(delay_s=0.2)]
    candidates = [(f"c{i}", fake_source(1.0 + i / 10, tag=f"c{i}")) for i in range(6)]
    run = fixed_pool_run(workers, candidates, tmp_path / "w2", "fakesoft", {"rows": 4, "cols": 8}, "fp32")
    assert (run["workers"], run["candidates"], run["passed"]) == (2, 6, 6)
    assert sorted(sum((w.checked for w in workers), [])) == [f"fakesoft_{i:03d}.py" for i in range(6)]
    assert all(w.checked for w in workers) and all(w.closed for w in workers)
    # each candidate's timing is the one its fake source carries; the rate is the count over the wall time
    assert sorted(run["kernel_ms"]) == [1.0 + i / 10 for i in range(6)]
    assert run["per_hour"] == run["candidates"] / run["wall_s"] * 3600
