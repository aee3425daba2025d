"""scripts/kb_merge.py: chunks of a KernelBench sample merge into the score one batch would give."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from autokernel.engine.kernelbench import ProblemResult, fast_p

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kb_merge.py"


def _chunk(rows: list[ProblemResult], device: str = "cuda") -> dict:
    return {"problems": [r.to_json() for r in rows], "fast_p": fast_p(rows), "total": len(rows), "complete": True,
            "meaningful": True, "device": device, "agent": "playbook", "command": "autokernel kernelbench ..."}


def _row(name: str, status: str, eager: float | None = None) -> ProblemResult:
    return ProblemResult(name=name, path=f"/kb/{name}.py", status=status, speedup_eager=eager, speedup_compile=eager,
                         meaningful=True)


def test_chunks_merge_into_one_batchs_score(tmp_path):
    a = [_row("1_a", "correct", 2.5), _row("2_b", "no-kernel", 1.0)]
    b = [_row("3_c", "correct", 0.8), _row("4_d", "skipped")]
    for name, rows in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(_chunk(rows)))
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                           "-o", str(tmp_path / "all.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    merged = json.loads((tmp_path / "all.json").read_text())
    assert merged["fast_p"] == fast_p(a + b)
    assert merged["fast_p"]["eager"] == {"0": 0.5, "1.0": 0.25, "1.5": 0.25, "2.0": 0.25}
    assert merged["total"] == 4 and merged["statuses"]["no-kernel"] == 1 and len(merged["chunks"]) == 2


def test_a_problem_in_two_chunks_or_chunks_on_two_devices_are_refused(tmp_path):
    one = [_row("1_a", "correct", 2.5)]
    (tmp_path / "a.json").write_text(json.dumps(_chunk(one)))
    (tmp_path / "cpu.json").write_text(json.dumps(_chunk([_row("2_b", "correct", 1.0)], device="cpu")))
    for second, why in (("a.json", "more than one chunk: /kb/1_a.py"), ("cpu.json", "different devices")):
        done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a.json"), str(tmp_path / second),
                               "-o", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and why in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_rerun_replaces_its_problems_rows_and_must_be_of_the_chunks(tmp_path):
    chunk = [_row("1_a", "incorrect"), _row("2_b", "correct", 2.0)]
    rerun = [_row("1_a", "correct", 1.5)]
    (tmp_path / "a.json").write_text(json.dumps(_chunk(chunk)))
    (tmp_path / "fix.json").write_text(json.dumps(_chunk(rerun)))
    (tmp_path / "stray.json").write_text(json.dumps(_chunk([_row("9_z", "correct", 1.0)])))
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a.json"), "--rerun", str(tmp_path / "fix.json"),
                           "-o", str(tmp_path / "all.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    merged = json.loads((tmp_path / "all.json").read_text())
    assert [r["status"] for r in merged["problems"]] == ["correct", "correct"] and merged["total"] == 2
    assert merged["fast_p"] == fast_p([rerun[0], chunk[1]]) and merged["rerun_problems"] == 1
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a.json"), "--rerun", str(tmp_path / "stray.json"),
                           "-o", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "a rerun problem is in no chunk: /kb/9_z.py" in done.stderr


def test_a_rerun_that_also_ran_new_problems_adds_them_and_devices_may_mix_when_asked(tmp_path):
    chunk = [_row("1_a", "incorrect"), _row("2_b", "correct", 2.0)]
    later = [_row("1_a", "correct", 1.5), _row("3_c", "correct", 0.5)]  # a fix of 1_a, and a new chunk's 3_c
    (tmp_path / "a.json").write_text(json.dumps(_chunk(chunk, device="NVIDIA H100")))
    (tmp_path / "later.json").write_text(json.dumps(_chunk(later, device="NVIDIA H200")))
    base = [sys.executable, str(SCRIPT), str(tmp_path / "a.json"), "--rerun", str(tmp_path / "later.json"),
            "-o", str(tmp_path / "all.json")]
    done = subprocess.run([*base, "--rerun-adds"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "different devices" in done.stderr
    done = subprocess.run([*base, "--rerun-adds", "--mixed-devices"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    merged = json.loads((tmp_path / "all.json").read_text())
    assert [r["name"] for r in merged["problems"]] == ["1_a", "2_b", "3_c"] and merged["total"] == 3
    assert merged["fast_p"] == fast_p([later[0], chunk[1], later[1]])
    assert merged["device"] == ["NVIDIA H100", "NVIDIA H200"]
