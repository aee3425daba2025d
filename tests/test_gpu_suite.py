"""scripts/gpu_suite.sh's background mode, as it is used on the lent GPU: started with --background, then
polled with --wait until it reports the suite done (run 9 lost six device minutes when the done mark went
to /suite.done and --wait never saw it)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = Path("/tmp/ak-results")  # the script's default when RESULTS is not set


def test_background_suite_marks_itself_done_where_wait_looks(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RESULTS"}
    env.update(OUT=str(tmp_path / "out"), DEVICE="cpu", SIZE="small")
    done = DEFAULT_RESULTS / "suite.done"
    done.unlink(missing_ok=True)
    script = str(ROOT / "scripts" / "gpu_suite.sh")
    subprocess.run(["bash", script, "--background", "no_such_step"], env=env, check=True, timeout=60)
    deadline = time.time() + 30
    while not done.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert done.exists()
    waited = subprocess.run(["bash", script, "--wait", "20"], env=env, capture_output=True, text=True, timeout=60)
    assert "SUITE DONE" in waited.stdout
    assert (tmp_path / "out" / "results.tgz").exists()
