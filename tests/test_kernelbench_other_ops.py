"""Issue 17's CPU list, the ops no kernel type covers: a pooling, a loss and a norm over dim 1 each end correct
under the offline agent with a kernel of the tool's own (Inductor's seed of the whole problem), through a real
batch whose problems run side by side in child processes (two lanes on the CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBLEMS = Path(__file__).parent / "kernelbench_problems_other"
NAMES = ["level1/1_max_pool_2d", "level1/2_smooth_l1_loss", "level1/3_l2_normalize_dim1"]


@pytest.mark.timeout(1200)
def test_a_pooling_a_loss_and_a_norm_over_dim_1_end_correct_with_a_kernel_of_ours(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "kernelbench", str(PROBLEMS), "--device",
                           "cpu", "--workers", "2", "--max-experiments-per-problem", "1", "--db", str(tmp_path / "s.db"),
                           "--json"], capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["lanes"] == 2 and doc["complete"]
    rows = {r["name"]: r for r in doc["problems"]}
    assert list(rows) == NAMES
    for name, row in rows.items():
        assert row["status"] == "correct" and row["kernels"] == ["problem"], (name, row["status"], row["reason"])
        assert Path(row["model_new"]).is_file()
