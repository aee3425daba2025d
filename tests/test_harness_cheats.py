"""Cheats that survive fresh random inputs, the input-unchanged check and the op recorder's list of
compute ops, each caught (tests/cheat_candidates/): caches that recognise their inputs by the
tensor object, address, version counter or by reading values on the host, a shared output buffer,
torch.compile inside kernel_fn, numpy doing the work (CPU), a cache used only while nobody watches (caught by
the timer), and work done where no timer looks: a lazy tensor subclass, a background thread, a replaced clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel.engine.worker import Worker
from autokernel.kernels import get_spec

CHEATS = Path(__file__).parent / "cheat_candidates"

# candidate -> (stage it must fail at, words the reason must contain)
EXPECTED = {
    "weakref_cache.py": ("shape_sweep", "answered for the old ones"),
    "version_cache.py": ("shape_sweep", "answered for the old ones"),
    "shared_buffer.py": ("shape_sweep", "overwrote the output of the previous one"),
    "equal_cache.py": ("shape_sweep", "reads tensor values on the host (aten::equal)"),
    "item_fingerprint.py": ("smoke", "reads tensor values on the host (aten::_local_scalar_dense)"),
    # torch.compile under the harness's dispatch mode: newer torch compiles the frame (caught as
    # compiling), torch 2.11 falls back to eager (caught calling the reference op)
    "compiled_ref.py": ("smoke", ("runs torch.compile", "calls the reference op aten::_softmax")),
    "numpy_ref.py": ("smoke", "copies tensor values to Python/numpy (Tensor.numpy)"),
    # issue 19: the answer computed where no timer looks, or the timer itself changed
    "lazy_output.py": ("smoke", "returned a Lazy (a torch.Tensor subclass)"),
    "background_thread.py": ("smoke", "(fill)) after the call returns"),
    "import_thread.py": ("smoke", "(_serve)) after import"),
    "patches_clock.py": ("smoke", "replaced time.perf_counter at import"),
    "patches_events.py": ("smoke", "replaced torch.cuda.Event.elapsed_time during a call"),
}


@pytest.fixture(scope="module")
def worker():
    w = Worker(device="cpu")
    yield w
    w.close()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cheat_fails_at_the_right_stage(worker, name):
    stage, words = EXPECTED[name]
    report = worker.check(str(CHEATS / name), kernel="softmax")
    bad = report.first_failure
    assert bad is not None and (bad.name, bad.status) == (stage, "fail"), f"{name}: {report.to_json()}"
    assert any(w in bad.detail for w in ((words,) if isinstance(words, str) else words)), f"{name}: {bad.detail}"


def test_a_worker_left_with_a_candidates_thread_retires_and_the_starter_passes(worker):
    """A thread the candidate left running could act on the next candidate: the worker ends itself
    after that check, and a starter passes every guard in the fresh one (reduce's: the row paths of the
    softmax starter need a newer interpreter than the GPU image's Triton 3.6 has)."""
    assert not worker.check(str(CHEATS / "raises_brackets.py"), kernel="softmax").passed  # a live worker now
    restarts = worker.restarts
    assert not worker.check(str(CHEATS / "background_thread.py"), kernel="softmax").passed
    report = worker.check(str(get_spec("reduce").starters["triton"]), kernel="reduce")
    assert report.passed, report.to_json()
    assert worker.restarts == restarts + 1


def test_a_cache_used_only_when_unwatched_is_caught_by_the_timer(worker):
    path = str(CHEATS / "timed_cache.py")  # honest while a dispatch mode watches (the whole check passes)
    with pytest.raises(RuntimeError, match="output of a timed call is wrong"):
        worker.bench(path, kernel="softmax", shapes=[{"rows": 16, "cols": 256}], dtype="fp32")
    # the starter, timed the same way, is right on every timed call
    starter = str(get_spec("softmax").starters["triton"])
    (rec,) = worker.bench(starter, kernel="softmax", shapes=[{"rows": 16, "cols": 256}], dtype="fp32")
    assert rec.kernel_ms > 0 and rec.meaningful is False


def test_check_cli_prints_a_reason_that_looks_like_markup():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "check", str(CHEATS / "raises_brackets.py"),
                        "--kernel", "softmax", "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    assert "[/tmp/cache]" in r.stderr and "Traceback" not in r.stderr


def test_a_candidate_that_patches_the_harness_is_rejected(worker):
    report = worker.check(str(CHEATS / "patches_harness.py"), kernel="softmax")
    assert not report.passed
    assert "autokernel.engine.harness.compare" in report.error


needs_cuda = pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")


@needs_cuda
def test_gpu_side_stream_l2_set_aside_and_illegal_address_then_the_starter():
    starter = str(get_spec("softmax").starters["triton"])
    with Worker(device="cuda") as w:
        report = w.check(str(CHEATS / "l2_persist.py"), kernel="softmax")
        bad = report.first_failure
        assert bad is not None and bad.name == "smoke" and "persisting accesses" in bad.detail, report.to_json()
        # the same worker: the set-aside was undone before the next candidate's calls and timing
        assert w.check(starter, kernel="softmax").passed
        (rec,) = w.bench(starter, kernel="softmax", shapes=[{"rows": 4096, "cols": 4096}], dtype="bf16")
        assert rec.meaningful and rec.kernel_ms > 0 and rec.eager_ms > 0 and 0 < rec.fraction_of_ceiling < 1.2
        report = w.check(str(CHEATS / "side_stream.py"), kernel="softmax")
        bad = report.first_failure
        assert bad is not None and bad.name == "smoke" and "side stream" in bad.detail, report.to_json()
        report = w.check(str(CHEATS / "illegal_address.py"), kernel="softmax")
        bad = report.first_failure
        assert bad is not None and bad.status == "crash", report.to_json()
        assert w.check(starter, kernel="softmax").passed
