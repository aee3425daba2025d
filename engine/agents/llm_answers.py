"""Reading a model's answer: ideas in the `TIER:`/`TITLE:`/`HYPOTHESIS:` format with code blocks.

Models answer loosely (bold markers, ```py fences, prose around the code), so parsing is lenient
about form; each code block is then checked strictly, because a candidate that cannot run only
wastes a harness slot: it must parse, define `kernel_fn` with the spec's parameters (for a whole-problem
target, the class `ModelNew`), launch its own kernel for the backend, and not reach for files, the
network or other processes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable

from .base import TIERS, Idea, Variant

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)
_FIELD = re.compile(r"^[\s>*_#-]*(TIER|TITLE|HYPOTHESIS|VARIANT|LABEL)[\s*_]*:[\s*_]*(.*)$", re.I | re.M)
_THINKING = re.compile(r"<think(?:ing)?>.*?(?:</think(?:ing)?>|\Z)", re.S | re.I)  # reasoning models' drafts
_CODE_LANGS = {"", "python", "py", "python3"}

FORBIDDEN_MODULES = {"socket", "subprocess", "urllib", "requests", "http", "httpx", "shutil", "multiprocessing",
                     "ftplib", "smtplib", "pickle", "importlib", "signal"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "open", "input", "breakpoint"}
FORBIDDEN_OS = {"system", "popen", "remove", "unlink", "rmdir", "removedirs", "rename", "replace", "kill", "fork",
                "execv", "execve", "execvp", "spawnv", "_exit", "chmod", "chdir", "putenv"}


@dataclass
class Rejected:
    """A part of an answer that could not become a variant, and why."""

    reason: str
    excerpt: str


def expected_parameters(signature: str) -> list[tuple[str, bool]]:
    """[(name, has_default)] of a spec signature such as `kernel_fn(x, weight, eps=1e-6)`."""
    text = signature.strip()
    if not text.startswith("def "):
        text = "def " + text
    fn = ast.parse(text.rstrip(":") + ": pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    args = fn.args.posonlyargs + fn.args.args
    first_default = len(args) - len(fn.args.defaults)
    return [(a.arg, i >= first_default) for i, a in enumerate(args)]


def check_source(source: str, signature: str, backend: str, entry: str = "kernel_fn") -> str | None:
    """Why this candidate file cannot be used, or None if it can. `entry` is what it must define: the
    function `kernel_fn` (with the signature), or a whole-problem target's class `ModelNew`."""
    if not source.strip():
        return "the code block is empty"
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return f"the code does not parse: line {e.lineno}: {e.msg}"
    if entry != "kernel_fn":
        if not any(isinstance(n, ast.ClassDef) and n.name == entry for n in tree.body):
            return f"the code defines no top-level class {entry}; define {signature}"
    else:
        fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel_fn"]
        if not fns:
            return f"the code defines no top-level function kernel_fn; define {signature}"
        problem = _signature_problem(fns[-1], signature)
        if problem:
            return problem
    problem = _launch_problem(tree, backend)
    if problem:
        return problem
    return _danger(tree)


def parse_answer(text: str, signature: str, backend: str, default_tier: int, max_ideas: int = 3,
                 max_variants: int = 3, known_sources: list[str] = (), entry: str = "kernel_fn",
                 complete: Callable[[str], str] | None = None) -> tuple[list[Idea], list[Rejected]]:
    """The usable ideas of an answer and what was rejected. An answer with no code at all is one rejection;
    code identical to a `known_sources` file (the parent) is rejected too, since the loop would skip it.
    `complete` makes each code block the file the harness runs (a subgraph target's problem put in), or
    raises ValueError with the reason it cannot; the checks then read that file."""
    text = _THINKING.sub("", (text or "").replace("\r\n", "\n"))
    if not text.strip():
        return [], [Rejected("the answer is empty", "")]
    blocks = [(m.start(), m.end(), m.group(2)) for m in _FENCE.finditer(text) if m.group(1).lower() in _CODE_LANGS]
    if not blocks:
        return [], [Rejected("the answer has no ```python code block", _excerpt(text))]
    ideas, rejected = [], []
    seen = {_normalised(s) for s in known_sources}
    for chunk in _split_ideas(text):
        idea, bad = _read_idea(chunk, signature, backend, default_tier, max_variants, seen, entry, complete)
        rejected += bad
        if idea is not None and len(ideas) < max_ideas:
            ideas.append(idea)
    return ideas, rejected


def _split_ideas(text: str) -> list[str]:
    """Chunks that each start at a `TIER:` line (the whole text if there is none)."""
    starts = [m.start() for m in _FIELD.finditer(text)
              if m.group(1).upper() == "TIER" and not _in_fence(text, m.start())]
    if not starts:
        return [text]
    if text[: starts[0]].count("```") >= 2:  # code before the first TIER: belongs to an unheaded idea
        starts.insert(0, 0)
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def _read_idea(chunk: str, signature: str, backend: str, default_tier: int,
               max_variants: int, seen: set[str], entry: str = "kernel_fn",
               complete: Callable[[str], str] | None = None) -> tuple[Idea | None, list[Rejected]]:
    fields: dict[str, str] = {}
    first_fence = chunk.find("```")
    head = chunk if first_fence < 0 else chunk[:first_fence]
    hypothesis_end = -1
    for m in _FIELD.finditer(head):
        key = m.group(1).upper()
        if key not in fields:
            fields[key] = m.group(2).strip().strip("*_ ").strip()
            if key == "HYPOTHESIS":
                hypothesis_end = m.end()
    hypothesis = fields.get("HYPOTHESIS", "")
    if hypothesis_end >= 0:  # a hypothesis may run over several lines until the next field or the code
        more = []
        for line in head[hypothesis_end:].split("\n")[1:]:
            if _FIELD.match(line) or not line.strip():
                break
            more.append(line.strip())
        hypothesis = " ".join([hypothesis, *more]).strip()
    tier = _tier(fields.get("TIER", ""), default_tier)
    title = fields.get("TITLE") or _first_line(head) or "LLM proposal"
    variants, rejected = [], []
    for n, (label, lang, written) in enumerate(_variants(chunk)):
        if lang.lower() not in _CODE_LANGS:
            continue
        code = written
        try:
            code = complete(written) if complete is not None else written
            reason = check_source(code, signature, backend, entry)
        except ValueError as e:
            reason = str(e)
        if reason is None and _normalised(code) in seen:
            reason = "the code repeats the parent (or another variant) unchanged"
        if reason is not None:
            rejected.append(Rejected(f"idea {title!r}: {reason}", _excerpt(written)))
            continue
        seen.add(_normalised(code))
        if len(variants) < max_variants:
            variants.append(Variant(source=code.rstrip() + "\n", label=label or f"{title} v{n + 1}",
                                    params={"tier": tier, "variant": n + 1}))
    if not variants:
        if not rejected:
            rejected.append(Rejected(f"idea {title!r} has no ```python code block", _excerpt(chunk)))
        return None, rejected
    return Idea(tier=tier, title=title[:120], hypothesis=hypothesis or title, variants=variants), rejected


def _variants(chunk: str) -> list[tuple[str, str, str]]:
    """(label, fence language, code) per fenced block; the label is the last VARIANT: line before it."""
    out, pos = [], 0
    for m in _FENCE.finditer(chunk):
        labels = [f.group(2).strip().strip("*_ ") for f in _FIELD.finditer(chunk[pos:m.start()])
                  if f.group(1).upper() in ("VARIANT", "LABEL")]
        out.append((labels[-1] if labels else "", m.group(1), m.group(2)))
        pos = m.end()
    return out


def _signature_problem(fn: ast.FunctionDef, signature: str) -> str | None:
    want = expected_parameters(signature)
    args = fn.args.posonlyargs + fn.args.args
    first_default = len(args) - len(fn.args.defaults)
    have = [(a.arg, i >= first_default) for i, a in enumerate(args)]
    got = f"kernel_fn({', '.join(a.arg for a in args)})"
    if [n for n, _ in have[: len(want)]] != [n for n, _ in want]:
        return f"wrong signature: {got}, expected {signature}"
    for (name, want_default), (_, has_default) in zip(want, have):
        if want_default and not has_default:
            return f"wrong signature: {got} gives {name} no default, expected {signature}"
    if any(not d for _, d in have[len(want):]):
        return f"wrong signature: {got} has extra required parameters, expected {signature}"
    return None


def _launch_problem(tree: ast.Module, backend: str) -> str | None:
    """A candidate must launch its own kernel: a @triton.jit function, or a cpp_extension build."""
    names = _imported(tree)
    if backend == "cuda":
        builders = ("torch.utils.cpp_extension", "autokernel.kernels.cuda_build")
        if not any(n.startswith(builders) for n in names) and "cpp_extension" not in ast.dump(tree):
            return "the code does not build a CUDA kernel (no torch.utils.cpp_extension load_inline)"
        return None
    if not any(n == "triton" or n.startswith("triton.") for n in names):
        return "the code does not import triton, so it cannot launch a Triton kernel"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if (isinstance(target, ast.Attribute) and target.attr == "jit") or (
                        isinstance(target, ast.Name) and target.id == "jit"):
                    return None
    return "the code defines no @triton.jit kernel"


def _danger(tree: ast.Module) -> str | None:
    for name in _imported(tree):
        if name.split(".")[0] in FORBIDDEN_MODULES:
            return f"the code imports {name} (no file, network or process access in a kernel)"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
                return f"the code calls {f.id}() (not allowed in a kernel file)"
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "os" \
                    and f.attr in FORBIDDEN_OS:
                return f"the code calls os.{f.attr}() (not allowed in a kernel file)"
    return None


def _imported(tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


def _tier(text: str, default: int) -> int:
    m = re.search(r"\d+", text)
    n = int(m.group()) if m else default
    return n if n in TIERS else default


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().strip("#*_ ").strip()
        if line and not _FIELD.match(line):
            return line[:80]
    return ""


def _in_fence(text: str, pos: int) -> bool:
    return text[:pos].count("```") % 2 == 1


def _normalised(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _excerpt(text: str, n: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= n else text[:n] + " ..."
