"""Random inputs for checks and timing: every regime non-zero and reproducible from its generator, and on a
GPU drawn on the device (drawn on the host, a 1 GB input cost seconds per trial at an LLM shape)."""

from __future__ import annotations

import pytest
import torch

from autokernel.kernels.spec import INPUT_MODES, random_tensor


def _draw(device, mode="normal", shape=(64, 96), dtype=torch.bfloat16, seed=7):
    return random_tensor(shape, dtype, device, torch.Generator().manual_seed(seed), mode)


@pytest.mark.parametrize("mode", INPUT_MODES)
def test_every_regime_is_nonzero_and_follows_its_generator(mode):
    a, b, c = _draw("cpu", mode), _draw("cpu", mode), _draw("cpu", mode, seed=8)
    assert a.dtype == torch.bfloat16 and a.shape == (64, 96) and bool((a != 0).all())
    assert torch.equal(a, b)
    assert mode == "constant" or not torch.equal(a, c)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", INPUT_MODES)
def test_on_a_gpu_inputs_are_drawn_on_the_device(mode):
    a, b = _draw("cuda", mode), _draw("cuda", mode)
    assert a.device.type == "cuda" and torch.equal(a, b) and bool((a != 0).all())
    shape = (262144, 2048)  # the Llama hot spots' softmax: 537M values
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        big = _draw("cuda", "normal", shape)
        torch.cuda.synchronize()
    # drawn on the device: nothing was copied from the host (a host draw shows as a host-to-device memcpy)
    uploads = [e.name for e in prof.events() if "HtoD" in e.name]
    assert not uploads, uploads
    assert torch.cuda.memory_stats().get("allocation.all.allocated", 0) > before
    assert abs(float(big.float().mean())) < 1e-3 and abs(float(big.float().std()) - 1.0) < 1e-2
