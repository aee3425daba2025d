"""A worker that holds far more memory after a candidate than when it started retires: what a hog allocated
stays with its module, and the next candidate must not run short because of it."""

from __future__ import annotations

from pathlib import Path

from autokernel.kernels import get_spec
from autokernel.engine.worker import Worker

STARTER = Path(get_spec("softmax").starters["triton"])


def test_a_worker_left_holding_a_hogs_memory_retires_and_a_plain_one_stays(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_WORKER_GROWTH_GB", "0.5")
    hog = tmp_path / "hog.py"  # correct, and keeps 1 GiB it allocated at import
    hog.write_text(STARTER.read_text() + "\n_HOARD = torch.ones(2**28)\n")
    with Worker(device="cpu") as w:
        assert w.check(str(STARTER), kernel="softmax", dtypes=["fp32"]).passed
        assert w.check(str(STARTER), kernel="softmax", dtypes=["fp32"]).passed
        assert w.restarts == 0  # an honest candidate leaves the worker as it was
        assert w.check(str(hog), kernel="softmax", dtypes=["fp32"]).passed  # its verdict stands
        assert w.check(str(STARTER), kernel="softmax", dtypes=["fp32"]).passed
        assert w.restarts == 1  # the hog's worker retired; the next candidate got a fresh one
