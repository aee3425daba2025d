"""Build a kernel's `.cu` source into a Python extension for the GPU in use, once, and cache it.

Every CUDA C++ candidate goes through `load_cuda_extension`, so the flags, the architecture and the
cache key are decided in one place. The module name carries a hash of the source, the flags and the
device architecture: an edited source or another GPU never picks up a stale build, and an unchanged
one is loaded from torch's extension cache (`TORCH_EXTENSIONS_DIR`, default
`~/.cache/torch_extensions`) without recompiling.

The nvcc flags are public (`nvcc_flags`) so the CPU-only compile test builds with exactly what the
GPU build uses. They put `kernels/include/` on the include path: the headers there (the sources' shared
helpers, their GEMM, the Hopper building blocks) serve every source, and their text is part of every
cache key.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from types import ModuleType

import torch

# Deliberately no --use_fast_math: it flushes denormals and swaps expf/division for approximations,
# which the fp32 tolerances of the harness are entitled to reject. Kernels opt into fast intrinsics
# one by one where the error is known to be harmless.
BASE_NVCC_FLAGS = ("-O3", "-lineinfo")
BASE_CXX_FLAGS = ("-O3",)

_KERNELS_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = _KERNELS_DIR / "include"
_built: dict[str, ModuleType] = {}  # by extension name
_by_file: dict[tuple, ModuleType] = {}  # by (path, mtime, size, device): the per-call fast path
_lock = threading.Lock()


def device_arch(device: int | None = None) -> str:
    """The compute capability of the current (or given) CUDA device as nvcc spells it, e.g. "90"."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}"


def nvcc_flags(arch: str) -> list[str]:
    """The nvcc flags for one architecture: real code for this GPU only (no PTX, no fat binary).

    Hopper (90) builds for sm_90a, the target that has wgmma and setmaxnreg, and defines
    AUTOKERNEL_SM90A so the sources compile their Hopper paths; the code runs only on that chip,
    which is the one it is built for.
    """
    include = f"-I{INCLUDE_DIR}"
    if arch == "90":
        return [*BASE_NVCC_FLAGS, include, "-gencode=arch=compute_90a,code=sm_90a", "-DAUTOKERNEL_SM90A"]
    return [*BASE_NVCC_FLAGS, include, f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def source_path(candidate_file: str, cu_name: str) -> Path:
    """The `.cu` beside a candidate file, or the library's copy when the candidate was moved alone.

    Candidates are sometimes copied into a session folder without their source; the starters'
    sources live in `kernels/<type>/<type>.cu`, which is where the second look goes.
    """
    beside = Path(candidate_file).resolve().with_name(cu_name)
    if beside.is_file():
        return beside
    library = _KERNELS_DIR / Path(cu_name).stem / cu_name
    if library.is_file():
        return library
    raise FileNotFoundError(f"CUDA source {cu_name} is neither beside {candidate_file} nor in {_KERNELS_DIR}")


def extension_name(cu_path: Path, arch: str) -> str:
    """A module name unique to this source text, the shared headers, the flags and the architecture
    (a valid identifier)."""
    digest = hashlib.sha256()
    digest.update(Path(cu_path).read_bytes())
    for header in sorted(INCLUDE_DIR.glob("*.cuh")):
        digest.update(header.read_bytes())
    digest.update(" ".join(nvcc_flags(arch)).encode())
    digest.update(torch.__version__.encode())
    stem = "".join(c if c.isalnum() else "_" for c in Path(cu_path).stem)
    return f"ak_{stem}_{digest.hexdigest()[:12]}_sm{arch}"


def require_cuda() -> None:
    """Fail with a clear message on machines where a CUDA starter cannot run at all."""
    if not torch.cuda.is_available():
        raise RuntimeError("the CUDA starter needs a CUDA GPU (torch.cuda.is_available() is False)")


def load_cuda_extension(cu_path: str | Path, verbose: bool = False) -> ModuleType:
    """Compile (or fetch from cache) the extension built from one `.cu` file for the current GPU.

    Thread-safe within a process; torch's own file lock keeps concurrent processes from building
    the same module twice.
    """
    require_cuda()
    # Fast path for every call after the first: kernel_fn calls this per invocation, so no hashing
    # or path resolution here, only a stat (an edited source has a new mtime or size).
    stat = os.stat(cu_path)
    quick_key = (str(cu_path), stat.st_mtime_ns, stat.st_size, torch.cuda.current_device())
    module = _by_file.get(quick_key)
    if module is not None:
        return module
    cu_path = Path(cu_path).resolve()
    arch = device_arch()
    name = extension_name(cu_path, arch)
    with _lock:
        module = _built.get(name)
        if module is not None:
            _by_file[quick_key] = module
            return module
        from torch.utils.cpp_extension import load  # slow import, only when a build is needed

        module = load(
            name=name,
            sources=[str(cu_path)],
            extra_cflags=list(BASE_CXX_FLAGS),
            extra_cuda_cflags=nvcc_flags(arch),
            verbose=verbose,
        )
        _built[name] = module
        _by_file[quick_key] = module
        return module
