"""scripts/gpu_results.py on the committed raw H100 runs: the pages come back with what the runs measured."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "docs" / "results" / "h100" / "raw"


def test_pages_are_made_from_the_raw_runs(tmp_path):
    runs = sorted((p for p in RAW.iterdir() if p.is_dir()), key=lambda p: p.name.rsplit("-", 1)[1])  # by time: run10 after run9
    assert len(runs) >= 18
    copies = []
    for run in runs:  # the script copies its inputs under OUT/raw: give it copies, oldest first
        shutil.copytree(run, tmp_path / "in" / run.name)
        copies.append(str(tmp_path / "in" / run.name))
    out = tmp_path / "pages"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_results.py"), *copies, "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    pages = {name: (out / name).read_text() for name in
             ("bench.md", "checks.md", "profile.md", "optimize.md", "hotspots.md", "kernelbench.md", "forward.md",
              "rowwise.md")}
    bench = pages["bench.md"]
    assert "## The kernel library's targets" in bench
    assert "| matmul | cuda | 4096×4096×4096 | 0.2060 |" in bench  # run 18's full bench: the wgmma CUDA matmul
    assert "38 of 38 shapes; lowest 0.70 (softmax 4096×32000)" in bench  # CUDA against Triton, within run 18
    assert "1 of 4 shapes; lowest 80% at 4096×4096" in bench  # layernorm, run 18
    assert "| reduce | 8192×4096 | 0.0285 | 0.0276 |" in bench  # run 21's re-bench beside run 18's full bench
    assert "h100-run13" not in bench  # run 13 re-benched before run 18 benched everything: not shown
    assert "lowest 1.00× at 8192×4096 | **missed** |" in bench  # reduce judged on run 21 (0.995×), not run 18's 0.96×
    assert "--max-experiments-per-problem 5" in pages["kernelbench.md"] and "fast_p" in pages["kernelbench.md"]
    assert "| fused_mlp modules | 13.556 | 12.624 |" in pages["optimize.md"]  # run 12: the TMA fused_mlp swapped in
    assert "1.31× eager, 1.07× torch.compile" in pages["optimize.md"]
    assert "| + fused_mlp | 25.349 | 1.31 | 7.637 |" in pages["forward.md"]
    assert "| fused_mlp | triton | 2048×8192×28672 | 4.1499 |" in bench
    assert pages["checks.md"].count("| PASS |") == 18
    assert "| hand two-pass v16384 w32 grid 1/SM evict_last, backwards | 0.2312 |" in pages["rowwise.md"]  # run 12's probe
    assert "## rotary_embedding 4×32×4096×128 (271 MB moved; h100-run17-20261124T1347)" in pages["rowwise.md"]  # merged
    assert "| hand flat 2048 w8 | 0.0946 |" in pages["rowwise.md"]  # run 17: the form the rotary starter took
    assert "Reached 90%: softmax yes, rmsnorm yes, cross_entropy yes" in pages["hotspots.md"]  # run 14
    for name, text in pages.items():  # the committed pages are the script's output, not edited by hand
        assert text == (ROOT / "docs" / "results" / "h100" / name).read_text(), name
    provenance = (out / "raw" / "PROVENANCE.txt").read_text()
    assert "rebench_layernorm.json: raw/h100-run5-20261124T0516/rebench_layernorm.json" in provenance
