"""The GPU self-check's own logic, exercised on CPU with the references standing in for kernels.

On a machine without CUDA the script must say so and exit 2; its checker must pass a correct
function and name the first failing case of a wrong one (shape and dtype in the line).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from autokernel.kernels import available, get_spec
from autokernel.kernels.cuda_selfcheck import check_kernel, check_shapes, compare


def some_spec():
    names = available()
    if not names:
        pytest.skip("no kernel spec in this build yet")
    return get_spec(names[0])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_script_without_gpu_says_so_and_exits_2():
    result = subprocess.run(
        [sys.executable, "-m", "autokernel.kernels.cuda_selfcheck"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stdout


def test_script_rejects_unknown_kernel_names_in_one_line():
    if not torch.cuda.is_available():
        pytest.skip("the GPU check comes first without CUDA")
    result = subprocess.run(
        [sys.executable, "-m", "autokernel.kernels.cuda_selfcheck", "-k", "nonsense"], capture_output=True, text=True
    )
    assert result.returncode == 2 and "unknown kernel type" in result.stdout


def test_reference_passes_its_own_check():
    spec = some_spec()
    outcome = check_kernel(spec.name, spec, spec.reference, [torch.float32], device="cpu")
    assert outcome.status == "ok", outcome.detail
    assert f"{len(check_shapes(spec))}/{len(check_shapes(spec))} cases" in outcome.detail


def test_wrong_kernel_fails_with_the_case_named():
    spec = some_spec()

    def off_by_a_bit(*args):
        return spec.reference(*args) + 0.05

    outcome = check_kernel(spec.name, spec, off_by_a_bit, [torch.float32], device="cpu")
    assert outcome.status == "FAIL"
    assert "fp32" in outcome.detail and "outside tolerance" in outcome.detail


def test_raising_kernel_is_reported_not_propagated():
    spec = some_spec()

    def broken(*args):
        raise RuntimeError("illegal memory access")

    outcome = check_kernel(spec.name, spec, broken, [torch.float32], device="cpu")
    assert outcome.status == "FAIL" and "illegal memory access" in outcome.detail


def test_compare_handles_nan_shape_and_dtype():
    ref = torch.tensor([1.0, float("nan")])
    assert compare(ref.clone(), ref, 1e-6, 0)[0]
    inf = torch.tensor([float("inf"), 1.0])
    assert compare(inf.clone(), inf, 1e-6, 0)[0] and not compare(-inf, inf, 1e-6, 0)[0]
    assert not compare(torch.tensor([1.0, 2.0]), ref, 1e-6, 0)[0]
    assert "shape" in compare(torch.zeros(3), ref, 1e-6, 0)[2]
    assert "dtype" in compare(ref.half(), ref, 1e-6, 0)[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU build error")
def test_parallel_builds_report_each_failure_by_name():
    from autokernel.kernels.cuda_selfcheck import build_all

    results = build_all(["softmax", "reduce"], jobs=2)
    assert sorted(results) == ["reduce", "softmax"]
    for seconds, error in results.values():
        assert seconds >= 0 and "needs a CUDA GPU" in error


def test_run_case_catches_input_modification_and_checks_noncontiguous_inputs():
    from autokernel.kernels.cuda_selfcheck import run_case

    spec = some_spec()
    shape = dict(spec.smoke_shape)
    good = run_case(spec, spec.reference, shape, torch.float32, "cpu", seed=3, mode="mixed", noncontiguous=True)
    assert good.ok and good.reproducible, good.problem

    def scribbles(*args):
        out = spec.reference(*args)
        args[0].add_(1.0)
        return out

    bad = run_case(spec, scribbles, shape, torch.float32, "cpu", seed=3)
    assert not bad.ok and "modified its input #0" in bad.problem


def test_build_failure_shows_the_compiler_error_not_the_ninja_epilogue():
    from autokernel.kernels.cuda_selfcheck import first_error_line

    output = (
        "Error building extension 'ak_softmax_0123': [1/2] nvcc ... -c softmax.cu\n"
        "FAILED: softmax.cuda.o\n"
        "softmax.cu(42): error: identifier \"foo\" is undefined\n"
        "1 error detected in the compilation of \"softmax.cu\".\n"
        "ninja: build stopped: subcommand failed.\n"
    )
    assert first_error_line(output) == 'softmax.cu(42): error: identifier "foo" is undefined'
    assert first_error_line("ninja: build stopped") == "ninja: build stopped"
