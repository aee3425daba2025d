"""A CUDA C++ candidate as code that needs no file: its `.cu` source a string built by `load_inline`.

A CUDA candidate builds its `.cu` file through `autokernel.kernels.cuda_build` (`source_path(__file__,
"x.cu")`, `load_cuda_extension(SOURCE)`). A KernelBench submission may not look up files or import
autokernel, so here the `.cu` text (its `kernels/include/` headers written in, its comments left out) is
a string constant and `load_cuda_extension` a small function of the candidate's own that compiles that
string once per process with `torch.utils.cpp_extension.load_inline`, with the nvcc flags the library
build uses for the GPU at hand.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

BUILD_MODULE = "autokernel.kernels.cuda_build"
_USED = {"load_cuda_extension", "source_path"}
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)
_COMMENT_OR_STRING = re.compile(r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|//[^\n]*|/\*.*?\*/', re.S)

# The loader each inlined CUDA candidate carries; flags as kernels/cuda_build.py's nvcc_flags, less its
# include path (the headers are written into the source).
_LOADER = '''
_CUDA_BUILDS = {{}}


def load_cuda_extension(source):
    import hashlib
    from torch.utils.cpp_extension import load_inline
    major, minor = torch.cuda.get_device_capability()
    arch = f"{{major}}{{minor}}"
    hopper = arch == "90"
    flags = {nvcc!r} + (["-gencode=arch=compute_90a,code=sm_90a", "-DAUTOKERNEL_SM90A"] if hopper
                        else [f"-gencode=arch=compute_{{arch}},code=sm_{{arch}}"])
    key = hashlib.sha256("\\n".join([source, *flags, torch.__version__]).encode()).hexdigest()[:12]
    if key not in _CUDA_BUILDS:
        _CUDA_BUILDS[key] = load_inline(name=f"ak_inline_{{key}}_sm{{arch}}", cpp_sources=[], cuda_sources=[source],
                                        extra_cflags={cxx!r}, extra_cuda_cflags=flags)
    return _CUDA_BUILDS[key]
'''


def uses_cuda_build(source: str) -> bool:
    return BUILD_MODULE in source


def cuda_text(cu_path: Path, include_dir: Path, seen: set[str] | None = None) -> str:
    """A `.cu` file's text with each `#include "x"` found in `include_dir` written in (once), and its
    comments left out (KernelBench's static check reads a string's words, and theirs say "pass")."""
    seen = set() if seen is None else seen

    def include(m: re.Match) -> str:
        header = include_dir / m.group(1)
        if not header.is_file():
            return m.group(0)
        if header.name in seen:
            return ""
        seen.add(header.name)
        return cuda_text(header, include_dir, seen)

    text = _COMMENT_OR_STRING.sub(lambda m: m.group(1) or "", Path(cu_path).read_text())
    text = _INCLUDE.sub(include, text).replace("#pragma once", "")
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip()) + "\n"


class _Inline(ast.NodeTransformer):
    def __init__(self, candidate: Path):
        self.candidate = candidate

    def visit_Call(self, node):
        node = self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "source_path" and len(node.args) == 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            from autokernel.kernels import cuda_build

            cu = cuda_build.source_path(str(self.candidate), node.args[1].value)
            return ast.Constant(cuda_text(cu, cuda_build.INCLUDE_DIR))
        return node


def inline_cuda(source: str, candidate_path: str | Path) -> str:
    """`source` (a CUDA candidate written at `candidate_path`) with its `.cu` text inline and its own
    `load_cuda_extension` on `load_inline`; ValueError for a use of the build helper this cannot inline."""
    from autokernel.kernels import cuda_build

    tree = ast.parse(source)
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == BUILD_MODULE
                for a in n.names}
    if imported - _USED:
        raise ValueError(f"{Path(candidate_path).name} uses {', '.join(sorted(imported - _USED))} of the CUDA build "
                         "helper, which a standalone ModelNew cannot carry")
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and n.module == BUILD_MODULE)]
    tree = _Inline(Path(candidate_path)).visit(tree)
    if any(isinstance(n, ast.Name) and n.id in ("__file__", "source_path") for n in ast.walk(tree)):
        raise ValueError(f"{Path(candidate_path).name} finds a file at run time, which a standalone ModelNew may not")
    loader = ast.parse(_LOADER.format(nvcc=list(cuda_build.BASE_NVCC_FLAGS), cxx=list(cuda_build.BASE_CXX_FLAGS)))
    first = 1 if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant) else 0
    tree.body[first:first] = [ast.Import([ast.alias("torch")]), *loader.body]
    return ast.unparse(ast.fix_missing_locations(tree))
