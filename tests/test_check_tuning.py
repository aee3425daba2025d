"""Autotuned candidates in the check's stages: every config still runs, timed by a short look (Triton's
full `do_bench` per config and key made such checks seconds long), and the bench tunes as Triton does; on the
interpreter, which has no timer for the autotuner, such a kernel is checked, benched and integrated."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from autokernel.engine import check_tuning
from autokernel.engine.worker import Worker

AUTOTUNED = Path(__file__).parent / "candidates" / "softmax_autotuned.py"


class _RecordingKernel:
    """Stands for the JITFunction under an autotuner: records each run's config (launching needs a GPU)."""

    def __init__(self):
        self.runs = []

    def run(self, *args, **kwargs):
        self.runs.append(kwargs["BLOCK"])


def _tuned_module():
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def tuned(x_ptr, n, BLOCK: tl.constexpr):
        pass

    module = types.ModuleType("candidate")
    module.tuned = tuned
    tuned.fn = _RecordingKernel()
    return module, tuned


def test_on_a_gpu_each_config_gets_a_short_look_and_the_autotuner_is_itself_after(monkeypatch):
    import triton.testing

    module, tuner = _tuned_module()
    before = dict(vars(tuner))
    looks = []

    def do_bench(fn, warmup=25, rep=100, quantiles=None, **_):
        fn()
        looks.append((warmup, rep))
        return [float(len(looks))] * len(quantiles)  # the first config looks fastest

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    with check_tuning.brief(module, "cuda") as tuners:
        assert tuners == [tuner]
        module.tuned[(1,)]("x", 100)
    assert looks == [(check_tuning.WARMUP_MS, check_tuning.REP_MS)] * 2  # each config, briefly
    assert tuner.fn.runs == [16, 64, 16]  # each config ran once in its look, then the chosen one
    slot = "_do_bench" if "_do_bench" in before else "do_bench"  # where this Triton keeps its benchmarker
    assert vars(tuner).get(slot, "unset") is before.get(slot, "unset")  # Triton's own timer again, for the bench


def test_a_module_without_autotuners_is_left_alone():
    plain = types.ModuleType("plain")
    plain.kernel_fn = lambda x: x
    with check_tuning.brief(plain, "cuda") as tuners:
        assert tuners == []
    with check_tuning.brief(None, "cpu") as tuners:
        assert tuners == []


@pytest.fixture(scope="module")
def worker():
    with Worker(device="cpu") as w:
        yield w


def test_a_multi_config_autotuned_candidate_is_checked_and_benched_on_the_interpreter(worker):
    # the interpreter has no device timer for Triton's autotuner: without a look of our own, this raised
    report = worker.check(str(AUTOTUNED), kernel="softmax", dtypes=["fp32"])
    assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]
    (rec,) = worker.bench(str(AUTOTUNED), kernel="softmax", shapes=[{"rows": 16, "cols": 256}], dtype="fp32")
    assert rec.kernel_ms > 0 and rec.meaningful is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_this_gpu_the_real_autotuner_takes_the_short_look(monkeypatch):
    # the slot the autotuner reads its benchmarker from differs between Triton releases: this one's, for real
    import triton.testing

    from autokernel.engine import harness

    real, looks = triton.testing.do_bench, []

    def spy(fn, warmup=25, rep=100, **kw):
        looks.append((warmup, rep))
        return real(fn, warmup=warmup, rep=rep, **kw)

    monkeypatch.setattr(triton.testing, "do_bench", spy)
    kernel_fn = harness.load_candidate(AUTOTUNED, "ak_test_softmax_autotuned")
    module = sys.modules["ak_test_softmax_autotuned"]
    x = torch.randn(64, 1000, device="cuda")
    with check_tuning.brief(module, "cuda"):
        y = kernel_fn(x)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1))
    assert looks == [(check_tuning.WARMUP_MS, check_tuning.REP_MS)] * 3  # each of the three configs


def test_an_autotuned_kept_kernel_integrates_on_the_interpreter(tmp_path):
    from autokernel.engine.examples import example_path
    from autokernel.engine.integrate import integrate_session_kernels

    # the integration test's RMSNorm with its rows per program left to triton.autotune
    plain = (Path(__file__).parent / "data" / "triton_rmsnorm.py").read_text()
    tune = '@triton.autotune(configs=[triton.Config({"ROWS": 16}), triton.Config({"ROWS": 64})], key=["n_rows"])\n'
    source = plain.replace("@triton.jit", tune + "@triton.jit").replace(
        "[(triton.cdiv(n_rows, 64),)](x2, weight, y, n_rows, n_cols, eps, ROWS=64,",
        "[lambda meta: (triton.cdiv(n_rows, meta['ROWS']),)](x2, weight, y, n_rows, n_cols, eps,")
    assert source.count("autotune") == 1 and "ROWS=64" not in source
    kernels = [{"kind": "rmsnorm", "candidate_id": "rmsnorm-0003", "source": source, "dtype": "fp32"}]
    result = integrate_session_kernels(str(example_path("llama")), "cpu", kernels, tmp_path / "work", size="small",
                                       trials=1, timeout_s=300, compile=False)
    assert result.correct, result.detail
    (rms,) = result.replaced
    assert rms["calls"] > 0 and not rms["mismatches"]
