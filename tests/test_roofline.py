"""Device ceilings: measured once, cached per device in $AUTOKERNEL_CACHE_DIR, and the floor arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from autokernel.engine import roofline
from autokernel.engine.roofline import Ceilings, floor_ms


def _fixed() -> Ceilings:
    return Ceilings("test device", bandwidth_gbs=1000.0, matmul_tflops={"fp32": 50.0, "bf16": 500.0}, measured=False)


def test_floor_is_the_slower_of_memory_and_compute():
    c = _fixed()
    # 1 GB at 1000 GB/s = 1 ms; 1 TFLOP at 50 TFLOP/s = 20 ms
    assert floor_ms(1e9, 1e12, "fp32", c) == pytest.approx(20.0)
    assert floor_ms(1e9, 1e12, torch.bfloat16, c) == pytest.approx(2.0)
    assert floor_ms(1e9, 0, "bf16", c) == pytest.approx(1.0)
    # fp16 missing from this table and integer dtypes fall back to the fp32 rate
    assert floor_ms(0, 1e12, torch.float16, c) == pytest.approx(20.0)
    assert floor_ms(0, 1e12, torch.int64, c) == pytest.approx(20.0)


def test_no_kernel_is_faster_than_a_launch():
    c = Ceilings("test device", bandwidth_gbs=1000.0, matmul_tflops={"fp32": 50.0}, measured=False, launch_us=3.0)
    assert floor_ms(1000, 10, "fp32", c) == pytest.approx(0.003)  # tiny work: one kernel's time
    assert floor_ms(0, 0, "fp32", c) == 0.0  # a view: no kernel at all
    assert floor_ms(1e9, 0, "fp32", c) == pytest.approx(1.0)


def test_cpu_ceilings_are_measured_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    # a fresh process, so the in-memory memo does not hide the measurement
    code = "import json; from autokernel.engine.roofline import ceilings; print(json.dumps(ceilings('cpu').to_json()))"
    c = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert c["measured"] and c["bandwidth_gbs"] > 0 and all(c["matmul_tflops"][d] > 0 for d in ("fp32", "fp16", "bf16"))
    assert c["launch_us"] > 0
    cached = json.loads((tmp_path / "ceilings.json").read_text())
    (key,) = cached
    assert c["device_name"] in key and torch.__version__ in key
    # the second call reads the file: change it and see the change come back
    cached[key]["bandwidth_gbs"] = 123.0
    (tmp_path / "ceilings.json").write_text(json.dumps(cached))
    roofline._memo.clear()
    assert roofline.ceilings("cpu").bandwidth_gbs == 123.0
    assert roofline.ceilings("cpu").meaningful is False


def test_a_corrupt_cache_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    (tmp_path / "ceilings.json").write_text("{not json")
    roofline._memo.clear()
    c = roofline.ceilings("cpu")
    assert c.bandwidth_gbs > 0 and c.measured
    assert json.loads((tmp_path / "ceilings.json").read_text())  # rewritten whole


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_ceilings_are_plausible():
    c = roofline.ceilings("cuda")
    assert c.meaningful and c.bandwidth_gbs > 100 and c.matmul_tflops["bf16"] > c.matmul_tflops["fp32"] * 0.5


def test_processes_measuring_at_once_agree(tmp_path, monkeypatch):
    """Two processes asking at the same moment: one measures, the other waits and reads its result."""
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    code = "import json; from autokernel.engine.roofline import ceilings; print(json.dumps(ceilings('cpu').to_json()))"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert outs[0] == outs[1]
    assert list(json.loads((tmp_path / "ceilings.json").read_text()).values()) == [outs[0]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_copy_of_a_kernels_own_size_is_measured_once_per_size():
    from autokernel.engine.roofline import copy_gbs_at

    small, large = copy_gbs_at(64 * 2**20), copy_gbs_at(2 * 2**30)
    assert 0 < small and 0 < large and small < 1.2 * large  # a small copy is never much faster than a large one
    assert copy_gbs_at(64 * 2**20) == small  # memoized
    assert copy_gbs_at(1024) is None  # too small to time


def test_a_time_under_the_floor_is_impossible_on_a_gpu_only():
    gpu = Ceilings("test gpu", bandwidth_gbs=1000.0, matmul_tflops={"fp32": 50.0}, measured=False, launch_us=2.0,
                   device="cuda")
    # 1 GB at 1000 GB/s: the floor is 1 ms; a little under it is a measured ceiling beaten, not a cheat
    assert roofline.impossible_time(1.0, 1e9, 0, "fp32", gpu) == ""
    assert roofline.impossible_time(0.8, 1e9, 0, "fp32", gpu) == ""
    why = roofline.impossible_time(0.5, 1e9, 0, "fp32", gpu)
    assert "under the floor of 1 ms" in why and "impossible" in why
    # compute-bound: 1 TFLOP at 50 TFLOP/s is 20 ms; and nothing beats one launch
    assert roofline.impossible_time(10.0, 0, 1e12, "fp32", gpu)
    assert roofline.impossible_time(0.0005, 1000, 0, "fp32", gpu)
    assert roofline.impossible_time(0.002, 1000, 0, "fp32", gpu) == ""
    # on CPU the interpreter's times are compared with nothing: never refused there
    cpu = Ceilings("test cpu", bandwidth_gbs=1000.0, matmul_tflops={"fp32": 50.0}, measured=False, device="cpu")
    assert roofline.impossible_time(0.5, 1e9, 0, "fp32", cpu) == ""
