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
    assert len(runs) >= 10
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
    assert "## The kernel library's targets, against this run" in bench
    assert "| cross_entropy | 1024×32000 | 0.1234 | 0.0343 |" in bench  # the re-bench beside the full bench
    assert "--max-experiments-per-problem 5" in pages["kernelbench.md"] and "fast_p" in pages["kernelbench.md"]
    assert "| fused_mlp modules | 13.789 | 12.877 |" in pages["optimize.md"]  # run 9: the TMA fused_mlp swapped in
    assert "1.32× eager, 1.04× torch.compile" in pages["optimize.md"]
    assert "| + fused_mlp | 25.349 | 1.31 | 7.637 |" in pages["forward.md"]
    assert "| fused_mlp | 2048×8192×28672 | 4.7895 | 4.0767 |" in bench
    assert pages["checks.md"].count("| PASS |") == 18
    assert "| hand v8192 w8 | 0.1908 | 2,748 | 91.6% | 93% | 0.3% |" in pages["rowwise.md"]  # run 10's probe
    for name, text in pages.items():  # the committed pages are the script's output, not edited by hand
        assert text == (ROOT / "docs" / "results" / "h100" / name).read_text(), name
    provenance = (out / "raw" / "PROVENANCE.txt").read_text()
    assert "rebench_layernorm.json: raw/h100-run5-20261124T0516/rebench_layernorm.json" in provenance
