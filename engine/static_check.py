"""The static rules a KernelBench submission is held to before it runs, checked on our own ModelNew files.

KernelBench reads a submission's text (comments left out, strings and docstrings not) and rejects one that
could fall back to PyTorch or fake its timing: a try/except, a `pass` (a subclass of Model that changes
nothing), threads or processes, a tensor subclass, a timing function reassigned; and one that shows no
kernel of its backend (Triton: a `@triton.jit` or `@triton.autotune` function using `tl.*`; CUDA: a
`__global__` function compiled through `torch.utils.cpp_extension`). This is our own reading of those
rules, a little stricter where ours is simpler: comments are found by Python's tokenizer.
"""

from __future__ import annotations

import io
import re
import tokenize

BACKENDS = ("triton", "cuda")

_ALWAYS = (  # (pattern, why the file is rejected)
    (r"\btry\s*:", "a try block (a way to fall back to PyTorch)"),
    (r"\bexcept\b\s*(:|\w)", "an except clause (a way to fall back to PyTorch)"),
    (r"\bpass\b", "the word `pass` (read as a subclass of Model that changes nothing)"),
    (r"\bimport\s+(threading|multiprocessing)\b|\bfrom\s+(threading|multiprocessing)\s+import\b"
     r"|\bthreading\.Thread\s*\(|\bconcurrent\.futures\b|\b(Thread|Process)PoolExecutor\b", "threads or processes"),
    (r"_make_subclass|\bclass\s+\w+.*\((torch\.)?Tensor\)|torch\.Tensor\.__new__", "a tensor subclass"),
    (r"\b(torch\.cuda\.Event(\.record|\.elapsed_time)?|torch\.cuda\.synchronize|time\.perf_counter|time\.time)\s*=(?!=)",
     "a timing function reassigned"),
)
_BACKEND = {
    "triton": ((r"@triton\.(jit|autotune)\b", "no @triton.jit or @triton.autotune function"),
               (r"\btl\.\w+", "no tl.* operation")),
    "cuda": ((r"__global__", "no __global__ kernel"),
             (r"\bload_inline\b|\bcpp_extension\b", "no load_inline or cpp_extension build")),
}


def _without_comments(code: str) -> str:
    """`code` with its comments blanked (the tokenizer knows a `#` in a string from a comment);
    for text that does not tokenize, everything after a `#` on each line."""
    lines = code.splitlines(keepends=True)
    try:
        comments = [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return "\n".join(line.split("#", 1)[0] for line in code.splitlines())
    for t in reversed(comments):
        row, col = t.start
        line = lines[row - 1]
        lines[row - 1] = line[:col] + line[col + len(t.string):]
    return "".join(lines)


def static_problems(code: str, backends: list[str] | tuple[str, ...] = ("triton",)) -> list[str]:
    """Why KernelBench's static rules would reject `code` as a solution for each of `backends`
    (an empty list: accepted). ValueError for a backend outside BACKENDS."""
    text = _without_comments(code)
    found = [why for pattern, why in _ALWAYS if re.search(pattern, text)]
    for backend in backends:
        if backend not in _BACKEND:
            raise ValueError(f"unknown backend {backend!r}: one of {', '.join(BACKENDS)}")
        found += [f"{backend}: {why}" for pattern, why in _BACKEND[backend] if not re.search(pattern, text)]
    return found
