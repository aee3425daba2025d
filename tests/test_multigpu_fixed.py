"""scripts/multigpu_bench.py: `fixed`, the pool alone, on a fixed list of candidates (no search path to differ
between a one-worker and an N-worker run); and the one-lane KernelBench baseline run as parts side by side."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from loop_doubles import FakeWorker, fake_source  # noqa: E402
from multigpu_bench import _ends, _one_lane_parts, _one_lane_sum, fixed_candidates, fixed_pool_run  # noqa: E402

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


def test_the_one_lane_baseline_is_dealt_into_parts_whose_walls_add_up(tmp_path):
    problems = [tmp_path / f"{i}_p.py" for i in range(1, 8)]
    for path in problems:
        path.write_text("class Model: pass\ndef get_inputs(): return []\n")
    parts = _one_lane_parts([str(p) for p in problems], 3)
    assert [[Path(p).name for p in part] for part in parts] == [["1_p.py", "4_p.py", "7_p.py"],
                                                                  ["2_p.py", "5_p.py"], ["3_p.py", "6_p.py"]]
    assert _one_lane_parts([str(problems[0])], 3) == [[str(problems[0])]]  # never an empty part

    def part(names, wall):
        rows = [{"name": n, "path": n, "status": "correct", "speedup_eager": 2.0, "speedup_compile": 0.5,
                 "seconds": wall / len(names)} for n in names]
        return {"rc": 0, "wall_s": wall, "out": {"problems": rows}, "sessions": [{"session": n} for n in names]}

    whole = _one_lane_sum([part(["a", "b"], 10.0), part(["c"], 4.0)])
    assert whole["wall_s"] == 14.0 and [r["name"] for r in whole["out"]["problems"]] == ["a", "b", "c"]
    assert whole["out"]["statuses"]["correct"] == 3 and whole["out"]["fast_p"]["eager"]["1.0"] == 1.0
    assert len(whole["parts"]) == 2 and len(whole["sessions"]) == 3


def test_processes_side_by_side_are_each_dated_by_their_own_exit(tmp_path):
    """The first listed ends only after the second has ended: waiting on them in turn would date both alike."""
    go = tmp_path / "go"
    slow = subprocess.Popen([sys.executable, "-c", f"import os, time\nwhile not os.path.exists({str(go)!r}): "
                                                   "time.sleep(0.05)"])
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    releaser = threading.Thread(target=lambda: (quick.wait(), time.sleep(1.0), go.touch()))
    releaser.start()
    slow_end, quick_end = _ends([slow, quick])
    releaser.join()
    assert quick_end < slow_end


def _fake_nvidia_smi(tmp_path: Path, monkeypatch, apps: str) -> None:
    """An `nvidia-smi` on PATH that answers the two queries the benchmark asks, as the real one prints them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "apps.txt").write_text(apps)
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      "case \"$1\" in\n"
                      "  --query-gpu=*) printf '0, GPU-aaa\\n1, GPU-bbb\\n' ;;\n"
                      f"  --query-compute-apps=*) cat {tmp_path / 'apps.txt'} ;;\n"
                      "esac\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_phase_two_names_each_process_still_holding_a_gpu_and_stops_waiting_when_they_end(tmp_path, monkeypatch):
    from multigpu_bench import _foreign_gpu_processes, _wait_for_free_gpus

    _fake_nvidia_smi(tmp_path, monkeypatch, "GPU-bbb, 4711\nGPU-aaa, 99\n")
    assert _foreign_gpu_processes() == ["gpu 1: pid 4711", "gpu 0: pid 99"]
    assert _wait_for_free_gpus(0) == ["gpu 1: pid 4711", "gpu 0: pid 99"]  # no time left: timed anyway, and said

    def the_job_ends():
        time.sleep(1.0)
        (tmp_path / "apps.txt").write_text("")

    threading.Thread(target=the_job_ends).start()
    assert _wait_for_free_gpus(60) == []


def test_without_nvidia_smi_nothing_is_held(tmp_path, monkeypatch):
    from multigpu_bench import _foreign_gpu_processes

    monkeypatch.setenv("PATH", str(tmp_path))
    assert _foreign_gpu_processes() == []
