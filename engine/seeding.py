"""Engine side of the Inductor seed: run `autokernel.engine.inductor_seed` in a subprocess, read its verdict.

The engine process never imports candidates, and Inductor's code generation can fail or crash in ways
no `except` catches (a C++ abort, a hung compile); a subprocess keeps all of that out of the session,
which only learns "here is the seed file" or one line saying why there is none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SEED_TIMEOUT_S = 300.0
CHANNELS_LAST = "channels_last"  # a seed's variant with its convolutions in the layout Inductor picks for a GPU
NO_SEED = "no operation of a kernel type autokernel knows, and Inductor could not seed it"  # the skip's reason


def _one_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:limit]


def seed_problem(problem: str | Path, out: Path, size: str | None = None,
                 timeout_s: float = SEED_TIMEOUT_S) -> tuple[Path | None, str]:
    """(the seed file, "") when Inductor's code for `problem` became a candidate at `out`; else (None, why)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "autokernel.engine.inductor_seed", str(problem), "-o", str(out)]
    if size:
        cmd += ["--size", size]
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # code generation only: nothing runs a kernel here
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"Inductor's code generation took longer than {timeout_s:.0f} s"
    except OSError as e:
        return None, f"could not start the seed subprocess: {e}"
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("{")]
    try:
        verdict = json.loads(verdicts[-1]) if verdicts else None
    except json.JSONDecodeError:
        verdict = None
    if verdict is None:
        return None, f"the seed subprocess exited {done.returncode}: {_one_line(done.stderr)}"
    if not verdict.get("ok"):
        return None, _one_line(str(verdict.get("error") or "no reason given"))
    if not out.exists():
        return None, f"the seed subprocess reported {out.name} but did not write it"
    return out, ""


def variant_path(seed: Path, name: str) -> Path:
    """Where the seed generator writes a seed's variant: `<seed stem>.<name>.py` beside it."""
    return seed.with_name(f"{seed.stem}.{name}.py")


def seed_variants(seed: str | Path) -> dict[str, str]:
    """The variants written beside a seed file, {name: path} ({} when there are none)."""
    seed = Path(seed)
    return {p.name[len(seed.stem) + 1:-3]: str(p) for p in sorted(seed.parent.glob(f"{seed.stem}.*.py"))}
