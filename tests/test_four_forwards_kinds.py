"""scripts/four_forwards.py without --kinds keeps the starters of the kernel types the model's profile finds,
so a user's own model is measured with its own operations, not the bundled Llama's list."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _kinds(model: str) -> list[str]:
    code = ("import sys; sys.path.insert(0, 'scripts'); import four_forwards; "
            f"print(','.join(four_forwards.profiled_kinds({model!r}, 'cpu', 'small', 'triton')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1].split(",")


def test_the_default_kinds_are_those_each_model_is_made_of():
    from autokernel.engine.examples import example_path

    llama, vit = _kinds(str(example_path("llama"))), _kinds(str(example_path("vit")))
    assert {"rmsnorm", "rotary_embedding", "cross_entropy"} <= set(llama) and "layernorm" not in llama
    assert {"layernorm", "softmax"} <= set(vit) and "rmsnorm" not in vit
