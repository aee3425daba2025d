"""What the parallel warm-up (engine/precompile.py) saves on a starter's first, cold check.

    python3 scripts/precompile_probe.py --kernels flash_attention:triton softmax:triton -o OUT.json

Each kernel is checked with `autokernel check` twice per round, without and with AUTOKERNEL_PARALLEL_COMPILE=1,
each time with an empty Triton cache of its own (a first check on a fresh box compiles every specialization),
the order swapped every round. Prints the wall time and the five stages' seconds of each check and whether
both passed; writes them to OUT.json. A benchmark for a GPU box: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = {"serial": "0", "parallel": "1"}


def check_once(kernel: str, backend: str, device: str, parallel: str) -> dict:
    """One cold check in a fresh process: its wall seconds, verdict and stages."""
    with tempfile.TemporaryDirectory(prefix="ak-probe-triton-") as cache:
        env = dict(os.environ, AUTOKERNEL_PARALLEL_COMPILE=parallel, TRITON_CACHE_DIR=cache)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "check", "--kernel", kernel,
                            "--backend", backend, "--device", device, "--json"],
                           capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"wall_s": round(wall, 1), "passed": False, "error": (p.stderr or p.stdout)[-400:], "stages": {}}
    return {"wall_s": round(wall, 1), "passed": bool(doc.get("passed")), "error": doc.get("error") or "",
            "stages": {s["name"]: s.get("seconds") for s in doc.get("stages", [])}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", nargs="+", default=["flash_attention:triton"], help="KERNEL:BACKEND, e.g. softmax:triton")
    p.add_argument("--device", default="cuda")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("-o", "--out", default="precompile_probe.json")
    args = p.parse_args(argv)
    rows = []
    for item in args.kernels:
        kernel, _, backend = item.partition(":")
        for r in range(args.rounds):
            order = list(MODES.items()) if r % 2 == 0 else list(MODES.items())[::-1]
            for mode, flag in order:
                row = {"kernel": kernel, "backend": backend or "triton", "round": r, "mode": mode,
                       **check_once(kernel, backend or "triton", args.device, flag)}
                rows.append(row)
                stages = ", ".join(f"{k} {v:.1f}" for k, v in row["stages"].items() if v is not None)
                print(f"{kernel} {row['backend']} round {r} {mode}: {row['wall_s']} s, "
                      f"{'passed' if row['passed'] else 'FAILED ' + row['error'][:200]}; {stages}", flush=True)
    Path(args.out).write_text(json.dumps({"device": args.device, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
