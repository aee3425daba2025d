"""scripts/kb_seed_gain.py: per problem and target, the first measured candidate and the best the search kept."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kb_seed_gain.py"


def _bench(cid: str, target: str, ms: float) -> dict:
    return {"candidate_id": cid, "target": target, "kernel_ms": ms, "speedup_eager": 4.0 / ms, "speedup_compile": 2.0 / ms}


def test_the_seed_and_the_best_per_target(tmp_path):
    rows = [("s1", "problem_started", {"name": "12_conv_relu", "session_id": "s1"}),
            ("s1", "bench_result", _bench("problem-0001", "problem", 2.0)),
            ("s1", "decision", {"candidate_id": "problem-0001", "target": "problem", "decision": "kept"}),
            ("s1", "bench_result", _bench("problem-0002", "problem", 3.0)),
            ("s1", "decision", {"candidate_id": "problem-0002", "target": "problem", "decision": "discarded"}),
            ("s1", "bench_result", _bench("problem-0003", "problem", 1.0)),
            ("s1", "decision", {"candidate_id": "problem-0003", "target": "problem", "decision": "kept"}),
            ("s2", "problem_started", {"name": "3_gemv", "session_id": "s2"}),
            ("s2", "decision", {"candidate_id": "matmul-0001", "target": "matmul", "decision": "failed"})]
    path = tmp_path / "kb_events.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for seq, (sid, typ, payload) in enumerate(rows):
            f.write(json.dumps({"session_id": sid, "seq": seq, "ts": 0.0, "type": typ, "payload": payload}) + "\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[2] == "| 3_gemv | matmul | failed its checks | — | — |"  # natural order: 3 before 12
    assert lines[3] == ("| 12_conv_relu | problem | 2 ms (2.00x eager, 1.00x compile) | 1 ms (4.00x eager, 2.00x compile) "
                        "| 2.00x |")
