"""An Inductor seed whose kernels Triton's autotuner times over the launch configs Inductor's heuristic lists.

torch.compile times every config its heuristic lists for a kernel and keeps the fastest; a seed starts from
the first, untimed (engine/inductor_seed.py writes the rest as `K<i>_OTHER_CONFIGS`). This transform gives
each such kernel `@triton.autotune` over [its constants' config, then the listed ones], so one candidate
does that timing itself. Only Triton's public API is used: `triton.autotune`, `triton.Config`, a grid that
reads the config (`lambda meta: ...`), `restore_value` for what a run changes in place (`in_out_ptr*`, and
the targets of `tl.atomic_*`: the autotuner runs the kernel many times, the forward needs the result of one).
Under Triton's interpreter there is no GPU clock to time by: the file keeps each kernel's first config
alone, decided when it is imported.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_OTHER_CONFIGS = re.compile(r"^K(\d+)_OTHER_CONFIGS = (.+)$", re.M)
_AUTOTUNED = re.compile(r"^@triton\.autotune\(configs=_launch_configs\(.*\bK(\d+)_OTHER_CONFIGS\)", re.M)
_LAUNCH = re.compile(r"^(\s+)(\w+)\[.+\]\(.*\bnum_warps=K(\d+)_WARPS\b.*\)$", re.M)
_LAUNCH_KNOBS = {"num_warps": "WARPS", "num_stages": "STAGES"}  # launch keyword -> the seed's constant
_GRID_BLOCK = re.compile(r"^[XYZ]BLOCK$")  # a block size that sets how many programs the grid launches

_HELPER = '''
import os as _os

# Triton's autotuner times each launch configuration listed for a kernel and keeps the fastest, as torch.compile
# does on a GPU. Triton's interpreter has no GPU clock to time by: there each kernel keeps its first configuration.
TIME_LAUNCH_CONFIGS = _os.environ.get("TRITON_INTERPRET") != "1"


def _time_launch(kernel_call, quantiles=(0.5,)):
    """A config's time for the autotuner by CUDA events alone (ms at each quantile): Triton's own timer flushes
    the L2 and summarises with torch ops, which inside a forward read as the candidate computing in PyTorch."""
    kernel_call()
    torch.cuda.synchronize()
    times = []
    for _ in range(25):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        kernel_call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return [times[min(len(times) - 1, int(q * len(times)))] for q in quantiles]


def _launch_configs(first, others):
    """What the autotuner chooses among: the kernel's constants first, then the heuristic's others, each once."""
    listed = [first, *others] if TIME_LAUNCH_CONFIGS else [first]
    unique = [config for i, config in enumerate(listed) if config not in listed[:i]]
    return [triton.Config({k: v for k, v in config.items() if k not in ("WARPS", "STAGES")},
                          num_warps=config["WARPS"], num_stages=config["STAGES"]) for config in unique]

'''


@dataclass(frozen=True)
class AutotunedSeed:
    source: str
    kernels: list[int]  # the kernels this transform autotuned (K<i>), in order; [] when none could be


def autotuned_kernels(source: str) -> set[int]:
    """The kernels of a seed that Triton's autotuner already times over their listed configs."""
    return {int(m.group(1)) for m in _AUTOTUNED.finditer(source)}


def autotune_seed(source: str) -> AutotunedSeed:
    """The seed with every kernel that lists other configs, and is not autotuned yet, autotuned over them. A
    kernel whose launch cannot be read (no launch line, a grid that does not name its block sizes, a config
    that sets other constants than the launch passes) is left as it was."""
    tree = ast.parse(source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    done = autotuned_kernels(source)
    lines = source.splitlines()
    decorators: dict[str, str] = {}
    edits: list[tuple[int, int, list[str]]] = []  # (first row, last row, the lines that replace them)
    tuned = []
    for index, others in listed_configs(source).items():
        if index in done:
            continue
        launches = [(m.start(), m.group(2)) for m in _LAUNCH.finditer(source) if int(m.group(3)) == index]
        names = {name for _, name in launches}
        if len(names) != 1 or next(iter(names)) not in functions:
            continue
        name = names.pop()
        if not re.search(rf"^@triton\.jit\ndef {name}\(", source, re.M):
            continue  # no plain jit definition to put the autotuner on
        rows = [source.count("\n", 0, start) for start, _ in launches]
        rewritten = [_launch_without_knobs(lines, row, index, others) for row in rows]
        if any(r is None for r in rewritten):
            continue
        edits += [(first_row, row, new_lines) for row, (first_row, new_lines, _) in zip(rows, rewritten)]
        decorators[name] = _decorator(functions[name], index, rewritten[0][2])
        tuned.append(index)
    if not tuned:
        return AutotunedSeed(source, [])
    for first_row, row, new_lines in sorted(edits, reverse=True):  # from the bottom: rows above stay put
        lines[first_row: row + 1] = new_lines
    out = "\n".join(lines) + ("\n" if source.endswith("\n") else "")
    for name, decorator in decorators.items():
        out = re.sub(rf"^@triton\.jit\ndef {name}\(", lambda m: f"{decorator}\n{m.group(0)}", out, count=1, flags=re.M)
    if "def _launch_configs(" not in out:
        first = re.search(r"^K\d+_", out, re.M)
        out = out[: first.start()] + _HELPER.lstrip("\n") + "\n" + out[first.start():]
    compile(out, "autotuned seed", "exec")  # a transform that does not parse is our bug, found here
    return AutotunedSeed(out, sorted(tuned))


def listed_configs(source: str) -> dict[int, list[dict]]:
    """Per kernel, its `K<i>_OTHER_CONFIGS` as written ({'XBLOCK': 512, 'WARPS': 8, 'STAGES': 1}, ...)."""
    out = {}
    for m in _OTHER_CONFIGS.finditer(source):
        try:
            configs = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            continue
        if isinstance(configs, list) and configs and all(isinstance(c, dict) for c in configs):
            out[int(m.group(1))] = configs
    return out


def _launch_without_knobs(lines: list[str], row: int, index: int,
                          others: list[dict]) -> tuple[int, list[str], list[str]] | None:
    """(first row replaced, the lines that replace rows first..row, the constants the autotuner now sets) for
    the launch at `row`: the tuned keywords dropped, the grid a function of the config (its prefix lines, the
    temporaries Inductor's grid computes first, moved into it); None when the launch cannot be autotuned."""
    indent = lines[row][: len(lines[row]) - len(lines[row].lstrip())]
    call = ast.parse(lines[row].strip()).body[0].value
    prefix = f"K{index}_"
    knobs = {}  # launch keyword -> constant suffix, for those the autotuner sets
    for kw in call.keywords:
        if isinstance(kw.value, ast.Name) and kw.value.id.startswith(prefix):
            suffix = kw.value.id[len(prefix):]
            if _LAUNCH_KNOBS.get(kw.arg, kw.arg) != suffix:
                return None
            knobs[kw.arg] = suffix
    suffixes = set(knobs.values())
    if not {"WARPS", "STAGES"} <= suffixes or any(
            set(c) != suffixes or not all(isinstance(v, int) for v in c.values()) for c in others):
        return None
    call.keywords = [kw for kw in call.keywords if kw.arg not in knobs]
    grid = call.func.slice
    first_row, grid_lines = row, []
    used = {n.id for n in ast.walk(grid) if isinstance(n, ast.Name)}
    while first_row > 0:  # Inductor's grid prefix: single assignments of the temporaries its grid reads
        above = _single_assignment(lines[first_row - 1])
        if above is None or above.targets[0].id not in used or above.targets[0].id.endswith("numel"):
            break
        grid_lines.insert(0, above)
        used |= {n.id for n in ast.walk(above.value) if isinstance(n, ast.Name)}
        first_row -= 1
    meta = _ConfigReads(prefix, {s for s in suffixes if s not in _LAUNCH_KNOBS.values()})
    grid_lines = [meta.visit(stmt) for stmt in grid_lines]
    grid = meta.visit(grid)
    grid_blocks = {s for s in suffixes if _GRID_BLOCK.match(s)}
    leftover = [n.id for stmt in [*grid_lines, grid] for n in ast.walk(stmt)
                if isinstance(n, ast.Name) and n.id.startswith(prefix)]
    if leftover or not grid_blocks <= meta.read:
        return None  # a grid of fixed numbers (or of other constants) would not follow the config
    name = call.func.value.id
    if grid_lines:
        function = f"_k{index}_grid"
        body = [f"{indent}def {function}(meta):"] + [f"{indent}    {ast.unparse(s)}" for s in grid_lines]
        body.append(f"{indent}    return {ast.unparse(grid)}")
        call.func = ast.Subscript(ast.Name(name), ast.Name(function))
        return first_row, body + [indent + ast.unparse(call)], list(knobs.values())
    call.func = ast.Subscript(ast.Name(name), ast.Lambda(_meta_args(), grid))
    return first_row, [indent + ast.unparse(call)], list(knobs.values())


def _single_assignment(line: str) -> ast.Assign | None:
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return None
    stmt = tree.body[0] if len(tree.body) == 1 else None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt
    return None


def _meta_args() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[ast.arg("meta")], kwonlyargs=[], kw_defaults=[], defaults=[])


class _ConfigReads(ast.NodeTransformer):
    """`K0_XBLOCK` -> `meta['XBLOCK']` for the constants the autotuner sets; `read` says which were met."""

    def __init__(self, prefix: str, suffixes: set[str]) -> None:
        self.prefix, self.suffixes, self.read = prefix, suffixes, set()

    def visit_Name(self, node: ast.Name) -> ast.AST:
        suffix = node.id[len(self.prefix):] if node.id.startswith(self.prefix) else None
        if suffix not in self.suffixes:
            return node
        self.read.add(suffix)
        return ast.Subscript(ast.Name("meta"), ast.Constant(suffix))


def _decorator(function: ast.FunctionDef, index: int, knobs: list[str]) -> str:
    """`@triton.autotune(...)` for kernel `index`: its constants' config first, then its listed ones, keyed by
    its extents, restoring what a run changes in place."""
    params = [a.arg for a in function.args.args
              if a.annotation is None or "constexpr" not in ast.unparse(a.annotation)]
    first = "{" + ", ".join(f'"{k}": K{index}_{k}' for k in knobs) + "}"
    key = [p for p in params if p.endswith("numel")]
    restore = [p for p in params if p.startswith("in_out_ptr") or p in _atomic_targets(function)]
    text = (f"@triton.autotune(configs=_launch_configs({first}, K{index}_OTHER_CONFIGS),\n                 key={key!r}, "
            "do_bench=_time_launch")
    return text + (f", restore_value={restore!r})" if restore else ")")


def _atomic_targets(function: ast.FunctionDef) -> set[str]:
    """The pointer parameters the function's `tl.atomic_*` calls write through: the names their pointer
    arithmetic adds up, followed through the function's assignments but not into calls (a `tl.load` gives an
    index, not a pointer)."""
    sources: dict[str, set[str]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            names = _arithmetic_names(node.value)
            for target in node.targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name):
                        sources.setdefault(t.id, set()).update(names)
    found: set[str] = set()
    todo: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("tl.atomic_"):
            pointer = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
            todo += _arithmetic_names(pointer) if pointer is not None else []
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += sources.get(name, ())
    return {name for name in found if "ptr" in name}


def _arithmetic_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Call):
        return []
    return [name for child in ast.iter_child_nodes(node) for name in _arithmetic_names(child)]
