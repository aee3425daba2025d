"""A worker that holds far more memory after a candidate than when it started retires: what a hog allocated
stays with its module, and the next candidate must not run short because of it (on a GPU, every later
candidate would otherwise "not fit")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autokernel.kernels import get_spec
from autokernel.engine.worker import Worker

STARTER = Path(get_spec("softmax").starters["triton"])
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))]


@pytest.mark.parametrize("device", DEVICES)
def test_a_worker_left_holding_a_hogs_memory_retires_and_a_plain_one_stays(tmp_path, monkeypatch, device):
    monkeypatch.setenv("AUTOKERNEL_WORKER_GROWTH_GB", "0.5")
    hog = tmp_path / "hog.py"  # correct, and keeps 1 GiB it allocated at import (on the GPU where there is one)
    hog.write_text(STARTER.read_text() + f"\n_HOARD = torch.ones(2**28, device={device!r})\n")
    dtypes = ["fp32"]
    with Worker(device=device) as w:
        assert w.check(str(STARTER), kernel="softmax", dtypes=dtypes).passed
        assert w.check(str(STARTER), kernel="softmax", dtypes=dtypes).passed
        assert w.restarts == 0  # an honest candidate leaves the worker as it was
        assert w.check(str(hog), kernel="softmax", dtypes=dtypes).passed  # its verdict stands
        assert w.check(str(STARTER), kernel="softmax", dtypes=dtypes).passed
        assert w.restarts == 1  # the hog's worker retired; the next candidate got a fresh one
