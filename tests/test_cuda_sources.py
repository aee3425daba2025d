"""The CUDA C++ starters compile for Hopper (sm_90a) and Ampere (sm_80) with the flags the GPU build uses,
without a GPU.

The compiles, all with nvcc and `autokernel.kernels.cuda_build.nvcc_flags(arch)` plus the defines
torch adds to every extension build:
- each `.cu` alone with `-DAUTOKERNEL_NO_TORCH` for sm_90a: all device kernels, every dtype
  instantiation and the raw-pointer launchers (plain CUDA headers only), to an object file; and
  the same to PTX for sm_80, where the Hopper paths are left out;
- the torch bindings of all nine with `-DAUTOKERNEL_BINDINGS_ONLY` (the device code left out, the
  launchers only declared) in one translation unit, each file included in its own namespace with
  the headers included once up front, because parsing torch's headers costs ~25 s per unit.
  This machine's CUDA toolkit has no cuBLAS/cuSPARSE headers and torch's CPU wheel no generated
  `cuda_cmake_macros.h`, so the sources use only the c10 CUDA stream/guard headers and this test
  defines `C10_CUDA_NO_CMAKE_CONFIGURE_FILE`.
The sources share their helpers and the GEMM through kernels/include/ (on every build's include
path); an exported package carries those headers with it.
Also: importing each `starter_cuda.py` works without CUDA, and calling it says why it cannot run.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from autokernel.kernels import KERNEL_NAMES
from autokernel.kernels.cuda_build import INCLUDE_DIR, nvcc_flags

KERNELS_DIR = Path(__file__).resolve().parents[1] / "kernels"
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
ARCH = "90"
QUOTED_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"', re.M)


def cu_sources() -> dict[str, Path]:
    return {p.parent.name: p for p in sorted(KERNELS_DIR.glob("*/*.cu")) if p.stem == p.parent.name}


def torch_nvcc_defines() -> list[str]:
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    return list(COMMON_NVCC_FLAGS)


def nvcc(args: list[str], cwd: Path, arch: str = ARCH) -> subprocess.CompletedProcess:
    cmd = [NVCC, *torch_nvcc_defines(), *nvcc_flags(arch), "-std=c++17", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def with_headers(path: Path, seen: set[str] | None = None) -> str:
    """A source's text with the kernels/include/ headers it includes written in, each once: what the
    compiler reads."""
    seen = set() if seen is None else seen

    def expand(match: re.Match) -> str:
        name = match.group(1)
        if name in seen or not (INCLUDE_DIR / name).is_file():
            return match.group(0)
        seen.add(name)
        return with_headers(INCLUDE_DIR / name, seen)

    return QUOTED_INCLUDE.sub(expand, path.read_text())


def combined_binding_unit(sources: dict[str, Path]) -> str:
    """One translation unit holding every source's torch binding, each inside its own namespace. The
    system headers, and the shared headers the bindings include, come once up front (they guard
    themselves with #pragma once, so inside a namespace they would be seen by the first source only)."""
    headers: list[str] = []
    for path in sources.values():
        text = path.read_text()
        bindings = text[text.index("#ifndef AUTOKERNEL_NO_TORCH"):]
        found = re.findall(r"^\s*#include\s+(<[^>]+>)", text, re.M) + [f'"{h}"' for h in QUOTED_INCLUDE.findall(bindings)]
        headers += [h for h in found if h not in headers]
    lines = [f"#include {h}" for h in headers]
    for name, path in sources.items():
        lines += [
            "#undef TORCH_EXTENSION_NAME",
            f"#define TORCH_EXTENSION_NAME ak_{name}",
            f"namespace ak_{name} {{",
            f'#include "{path}"',
            "}",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def nvcc_out(tmp_path_factory) -> Path:
    """The folder the module's compiles write to; `kept_ptx` reads the sm_90a PTX they leave there."""
    return tmp_path_factory.mktemp("nvcc")


def kept_ptx(out: Path, name: str) -> Path:
    """The sm_90a PTX nvcc kept while compiling `name`.cu to an object file (`-keep`): the same text
    `nvcc -ptx` writes with those flags, without running the front end a second time."""
    return out / f"{name}.keep" / f"{name}.ptx"


@pytest.fixture(scope="module")
def compiled(nvcc_out):
    """Run every compile once, in parallel: {name: CompletedProcess} plus "<bindings>"."""
    sources = cu_sources()
    out = nvcc_out
    from torch.utils.cpp_extension import include_paths

    torch_includes = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    unit = out / "bindings.cu"
    unit.write_text(combined_binding_unit(sources))

    for name in sources:
        (out / f"{name}.keep").mkdir()
    jobs = {name: (ARCH, ["-DAUTOKERNEL_NO_TORCH", "-c", str(path), "-o", str(out / f"{name}.o"),
                          "-keep", "-keep-dir", str(out / f"{name}.keep")])
            for name, path in sources.items()}
    # sm_80: PTX only (no ptxas), enough to show the sources compile without their Hopper paths.
    jobs.update({f"{name}@sm80": ("80", ["-DAUTOKERNEL_NO_TORCH", "-ptx", str(path), "-o", str(out / f"{name}.sm80.ptx")])
                 for name, path in sources.items()})
    jobs["<bindings>"] = (ARCH, [*torch_includes, "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE", "-DAUTOKERNEL_BINDINGS_ONLY", "-c",
                                 str(unit), "-o", str(out / "bindings.o")])
    # The bindings unit is by far the longest: start it first.
    order = ["<bindings>", *(j for j in jobs if j != "<bindings>")]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(nvcc, jobs[name][1], out, jobs[name][0]) for name in order}
        return {name: f.result() for name, f in futures.items()}


def test_every_kernel_type_has_a_cuda_source():
    assert sorted(cu_sources()) == sorted(KERNEL_NAMES)


# ~70 s of CPU on an idle 2-core machine; the limit leaves room for a machine busy with other suites.
COMPILE_TIMEOUT = pytest.mark.timeout(900)


@needs_nvcc
@COMPILE_TIMEOUT
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_device_code_compiles_for_sm90(name, compiled):
    if name not in compiled:
        pytest.fail(f"kernels/{name}/{name}.cu is missing")
    result = compiled[name]
    assert result.returncode == 0, f"nvcc failed on {name}.cu:\n{result.stderr[-4000:]}"


@needs_nvcc
@COMPILE_TIMEOUT
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_device_code_compiles_for_sm80(name, compiled):
    if f"{name}@sm80" not in compiled:
        pytest.fail(f"kernels/{name}/{name}.cu is missing")
    result = compiled[f"{name}@sm80"]
    assert result.returncode == 0, f"nvcc failed on {name}.cu for sm_80:\n{result.stderr[-4000:]}"


@needs_nvcc
@COMPILE_TIMEOUT
@pytest.mark.parametrize("name", ["matmul", "fused_mlp", "flash_attention"])
def test_matrix_starters_hopper_paths_are_bulk_tensor_copies_and_wgmma(name, compiled, nvcc_out):
    """With the flags a Hopper build gets, the matrix starters' device code loads tiles with the bulk
    tensor copy (TMA) and multiplies with wgmma: the path that took them from a quarter of the Triton
    starters' speed (WMMA, mma.sync) to about par on an H100. Read from the PTX the sm_90a compile kept."""
    result = compiled[name]
    assert result.returncode == 0, f"nvcc failed on {name}.cu:\n{result.stderr[-4000:]}"
    text = kept_ptx(nvcc_out, name).read_text()
    assert "wgmma.mma_async" in text and "cp.async.bulk.tensor" in text


@needs_nvcc
@COMPILE_TIMEOUT
def test_torch_bindings_compile_for_sm90(compiled):
    result = compiled["<bindings>"]
    assert result.returncode == 0, f"nvcc failed on the torch bindings:\n{result.stderr[-6000:]}"


def _import_starter(path: Path):
    spec = importlib.util.spec_from_file_location(f"starter_cuda_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_starter_imports_and_refuses_without_gpu(name):
    path = KERNELS_DIR / name / "starter_cuda.py"
    assert path.is_file(), f"{path} is missing"
    module = _import_starter(path)
    assert callable(module.kernel_fn)
    assert module.SOURCE.is_file() and module.SOURCE.suffix == ".cu"
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the GPU self-check covers running the starter")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        module.kernel_fn(*[torch.zeros(2, 2)] * _arity(module))


def _arity(module) -> int:
    import inspect

    params = inspect.signature(module.kernel_fn).parameters.values()
    return sum(1 for p in params if p.default is inspect.Parameter.empty)


def test_build_key_changes_with_the_source(tmp_path):
    from autokernel.kernels.cuda_build import extension_name

    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() {}\n")
    first = extension_name(src, ARCH)
    assert first.isidentifier() and first == extension_name(src, ARCH)
    src.write_text("__global__ void k() { }\n")
    assert extension_name(src, ARCH) != first
    assert extension_name(src, "80") != extension_name(src, ARCH)


def test_source_path_falls_back_to_the_library_copy(tmp_path):
    from autokernel.kernels.cuda_build import source_path

    moved = tmp_path / "candidate.py"
    moved.write_text("")
    assert source_path(str(moved), "softmax.cu") == KERNELS_DIR / "softmax" / "softmax.cu"
    with pytest.raises(FileNotFoundError):
        source_path(str(moved), "nonexistent.cu")


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_source_follows_the_house_contract(name):
    """Launch on torch's current stream, check the launch, bind through TORCH_EXTENSION_NAME."""
    path = KERNELS_DIR / name / f"{name}.cu"
    assert path.is_file(), f"{path} is missing"
    text = with_headers(path)
    assert "c10::cuda::getCurrentCUDAStream()" in text, "kernels must run on the caller's current stream"
    assert "cudaGetLastError()" in text
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME" in text
    assert "#ifndef AUTOKERNEL_NO_TORCH" in text and "#ifndef AUTOKERNEL_BINDINGS_ONLY" in text
    assert "--use_fast_math" not in text
    # The stream is passed to every launch: a bare <<<grid, block>>> would run on the legacy default stream.
    for launch in re.findall(r"<<<([^>]*)>>>", text):
        assert launch.count(",") == 3, f"launch without an explicit stream: <<<{launch}>>>"


def test_cross_entropy_mean_uses_no_atomics():
    text = (KERNELS_DIR / "cross_entropy" / "cross_entropy.cu").read_text()
    assert not re.search(r"\batomic\w*\s*\(", text), "the mean must be a fixed-order reduction"


def test_extension_is_built_once_per_source_version(tmp_path, monkeypatch):
    """The per-call path must not rebuild (or rehash); an edited source must. torch's load is faked."""
    import torch.utils.cpp_extension as cpp_extension

    from autokernel.kernels import cuda_build

    builds = []
    monkeypatch.setattr(cuda_build, "require_cuda", lambda: None)
    monkeypatch.setattr(cuda_build, "device_arch", lambda device=None: ARCH)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda_build, "_built", {})
    monkeypatch.setattr(cuda_build, "_by_file", {})

    def fake_load(name, sources, extra_cflags, extra_cuda_cflags, verbose):
        builds.append((name, tuple(extra_cuda_cflags)))
        return object()

    monkeypatch.setattr(cpp_extension, "load", fake_load)
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() {}\n")
    first = cuda_build.load_cuda_extension(src)
    assert cuda_build.load_cuda_extension(src) is first and len(builds) == 1
    # Hopper gets sm_90a (wgmma, setmaxnreg) and the define that turns the sources' Hopper paths on
    assert "-gencode=arch=compute_90a,code=sm_90a" in builds[0][1] and "-DAUTOKERNEL_SM90A" in builds[0][1]
    assert f"-I{cuda_build.INCLUDE_DIR}" in builds[0][1]
    src.write_text("__global__ void k() { /* edited */ }\n")
    assert cuda_build.load_cuda_extension(src) is not first and len(builds) == 2
    assert builds[0][0] != builds[1][0]


def test_only_hopper_builds_take_the_sm90a_paths():
    """sm_90a code runs only on Hopper; any other GPU gets its own plain target and the WMMA/SIMT paths."""
    from autokernel.kernels.cuda_build import nvcc_flags

    assert "-DAUTOKERNEL_SM90A" in nvcc_flags("90")
    for arch in ("80", "89", "100"):
        flags = nvcc_flags(arch)
        assert f"-gencode=arch=compute_{arch},code=sm_{arch}" in flags and "-DAUTOKERNEL_SM90A" not in flags


# Helpers every source used to carry a copy of; each is now defined once, in kernels/include/.
SHARED_DEFINITIONS = {
    "dtype_code": r"\bint dtype_code\(const at::Tensor&",
    "check_input": r"\bvoid check_input\(const at::Tensor&",
    "to_float": r"\bfloat to_float\(float v\)",
    "from_float": r"\bT from_float\(float v\);",
    "load_vec": r"\bvoid load_vec\(",
    "store_vec": r"\bvoid store_vec\(",
    "aligned16": r"\bbool aligned16\(",
    "warp_sum": r"\bfloat warp_sum\(",
    "row_sum": r"\bfloat row_sum\(",
    "the GEMM": r"\bwmma_gemm_kernel\(",
    "the Hopper GEMM": r"\bwgmma_gemm_kernel\(",
}


@pytest.mark.parametrize("helper", sorted(SHARED_DEFINITIONS))
def test_shared_helpers_are_defined_once_in_the_headers(helper):
    pattern = re.compile(SHARED_DEFINITIONS[helper])
    files = sorted(KERNELS_DIR.glob("*/*.cu")) + sorted(INCLUDE_DIR.glob("*.cuh"))
    defined_in = [p.relative_to(KERNELS_DIR).as_posix() for p in files if pattern.search(p.read_text())]
    assert len(defined_in) == 1 and defined_in[0].startswith("include/"), f"{helper} is defined in {defined_in}"


def test_an_export_carries_every_header_the_sources_include(tmp_path):
    """An exported CUDA kernel builds from the package alone: the .cu files beside its starter and the
    vendored build helper, whose include path is the package's own copy of kernels/include/. Every
    header a source includes (and the headers those include) must be found there."""
    import importlib.util

    from autokernel.engine.export import vendor_cuda_build

    vendor_cuda_build(tmp_path)
    for path in cu_sources().values():
        shutil.copy(path, tmp_path / path.name)
    spec = importlib.util.spec_from_file_location("_vendored_cuda_build", tmp_path / "_cuda_build.py")
    vendored = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendored)
    assert vendored.INCLUDE_DIR == tmp_path / "include"

    pending = [tmp_path / p.name for p in cu_sources().values()]
    needed: set[str] = set()
    while pending:
        for name in QUOTED_INCLUDE.findall(pending.pop().read_text()):
            assert (vendored.INCLUDE_DIR / name).is_file(), f"{name} is not in the exported package"
            if name not in needed:
                needed.add(name)
                pending.append(vendored.INCLUDE_DIR / name)
    assert {"ak_vec.cuh", "ak_gemm.cuh", "ak_torch.cuh", "ak_hopper.cuh"} <= needed
    if NVCC is None:
        return
    # The preprocessor agrees: every shared header a Hopper build of the raw launchers reads is the package's.
    deps = subprocess.run([NVCC, "-M", "-std=c++17", *vendored.nvcc_flags(ARCH), "-DAUTOKERNEL_NO_TORCH",
                           *(p.name for p in cu_sources().values())], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert deps.returncode == 0, deps.stderr[-3000:]
    read = set(re.findall(r"(\S+/ak_\w+\.cuh)", deps.stdout))
    assert read and all(Path(h).parent == vendored.INCLUDE_DIR for h in read), read
