"""The CUDA C++ starters on a real GPU: built for this device, checked against their specs.

Skipped without CUDA. On a GPU machine the nine extensions are built once, in parallel processes
(about a minute on 16 cores; cached by torch afterwards), then each starter must match its reference
in every dtype on the smoke, edge and small sweep shapes, survive every input regime, accept
non-contiguous inputs, leave its inputs alone and repeat itself bitwise.
"""

from __future__ import annotations

import pytest
import torch

from autokernel.kernels import KERNEL_NAMES, available, get_spec
from autokernel.kernels.spec import DTYPE_NAMES, INPUT_MODES

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.timeout(900),  # the first test also builds all nine extensions
]


@pytest.fixture(scope="module")
def starters():
    """{name: kernel_fn} for every type with a spec and a CUDA starter; build errors fail the test."""
    from autokernel.kernels.cuda_selfcheck import build_all, import_file, starter_path

    names = [n for n in available() if starter_path(n).is_file()]
    built = build_all(names, jobs=min(8, max(1, len(names))))
    fns, errors = {}, {}
    for name in names:
        _, error = built[name]
        if error:
            errors[name] = error
        else:
            fns[name] = import_file(starter_path(name), f"ak_gpu_test_{name}").kernel_fn
    return fns, errors


def _starter(starters, name):
    fns, errors = starters
    if name in errors:
        pytest.fail(f"{name}.cu failed to build: {errors[name]}")
    if name not in fns:
        pytest.skip(f"no spec or CUDA starter for {name} in this build")
    return get_spec(name), fns[name]


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_cuda_starter_matches_reference(starters, name):
    from autokernel.kernels.cuda_selfcheck import check_kernel

    spec, fn = _starter(starters, name)
    outcome = check_kernel(name, spec, fn, list(spec.dtypes))
    assert outcome.status == "ok", outcome.detail


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_cuda_starter_in_every_regime_and_layout(starters, name):
    from autokernel.kernels.cuda_selfcheck import run_case

    spec, fn = _starter(starters, name)
    edge = dict(spec.edge_shapes[-1]) if spec.edge_shapes else dict(spec.smoke_shape)
    for dtype in spec.dtypes:
        for mode in INPUT_MODES:
            result = run_case(spec, fn, dict(spec.smoke_shape), dtype, "cuda", seed=11, mode=mode)
            assert result.ok, f"{DTYPE_NAMES[dtype]} {mode}: {result.problem}"
        result = run_case(spec, fn, edge, dtype, "cuda", seed=12, noncontiguous=True)
        assert result.ok, f"{DTYPE_NAMES[dtype]} non-contiguous {edge}: {result.problem}"
        assert result.reproducible, f"{DTYPE_NAMES[dtype]} {edge}: two calls differ"


def test_cuda_cross_entropy_mean_is_bitwise_repeatable_at_scale(starters):
    spec, fn = _starter(starters, "cross_entropy")
    args = spec.make_inputs({"rows": 4096, "vocab": 32000}, torch.bfloat16, "cuda", torch.Generator().manual_seed(5), "normal")
    first = fn(*args)
    assert all(torch.equal(first, fn(*args)) for _ in range(5))
