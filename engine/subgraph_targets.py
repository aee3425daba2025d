"""Profile rows of no kernel type as targets of an optimize session: each becomes a subgraph problem.

A row the nine kernel specs do not cover (a cumsum, a GELU, a log-softmax, a conv) is matched to the
nodes of the model's captured ATen graph (engine/subgraph.py), grown to the largest chain around it that
a fused kernel could replace and that no other target holds, written as a KernelBench-form problem in the
session's folder, and seeded from Inductor's Triton (engine/seeding.py) when the session reaches it.
Each is then searched like KernelBench mode's whole-problem target (`SubgraphSearch`), and its winner goes
back into the model through `kernel_fn` and engine/subgraph_patch.py. The playbook agent tunes the seed's
knobs; the LLM agent rewrites it, seeing it with its problem folded to one line (`fold_problem`) and writing
only kernels and ModelNew, which `complete_candidate` makes a whole candidate file again.

Capturing a model and seeding each problem cost seconds to minutes on a CPU, so the session plans these
targets only when its walk down the Amdahl order reaches the first such row with budget left, and seeds each
when it is reached; the plan (seeds included) is kept in `subgraphs/plan.json`, so a resumed session searches
the same problems without capturing or seeding again.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from .search import TargetSearch

PREFIX = "sub_"  # a subgraph target's name starts with it (a name is also a Python module name in an export)
MAX_TARGETS = {"cpu": 2, "cuda": 8}  # seeding runs Inductor's code generation: bound it, most on the CPU
SEED_TIMEOUT_S = {"cpu": 240.0, "cuda": 600.0}  # one seed's code generation
MIN_SHARE = 0.01  # on a GPU, a row under this share of the forward is not worth a capture, a seed and a search
PLAN_FILE = "plan.json"
# A seed inlines the problem's saved parameters and masks (it runs from anywhere), and the store keeps every
# candidate's source: a row whose saved values are larger would fill the store with copies of them.
MAX_SAVED_BYTES = 8 * 2**20


def is_subgraph(name: str) -> bool:
    return name.startswith(PREFIX)


# An Inductor seed carries its problem verbatim between these lines (engine/inductor_seed.py `write_seed`): the
# Model a ModelNew may subclass, and the `kernel_fn` with its SUBGRAPH through which a kept kernel goes back
# into the model. A candidate written by an LLM gets the same block from the seed (`complete_candidate`).
_PROBLEM_BLOCK = re.compile(
    r"^# ---- the problem (?P<name>[^\n]+?), verbatim ----\n.*?^# ---- end of the problem ----$", re.S | re.M)
PROBLEM_MARK = "# ---- the problem {name} goes here (the harness puts it in: Model, SUBGRAPH, kernel_fn) ----"
_RESERVED = ("kernel_fn", "SUBGRAPH", "_BUILT")  # the problem's: a candidate that defines them again breaks the swap


def fold_problem(source: str) -> str:
    """`source` with the problem it carries verbatim replaced by one mark line: what a prompt shows (the problem
    is shown once on its own, and its saved values, inline in a seed, can take megabytes)."""
    return _PROBLEM_BLOCK.sub(lambda m: PROBLEM_MARK.format(name=m.group("name")), source, count=1)


def problem_mark(seed_source: str) -> str | None:
    """The line that stands for the seed's problem in a folded file (None: the seed carries no problem)."""
    m = _PROBLEM_BLOCK.search(seed_source)
    return PROBLEM_MARK.format(name=m.group("name")) if m else None


def complete_candidate(code: str, seed_source: str) -> str:
    """A subgraph target's candidate file from the part an LLM writes (kernels and `class ModelNew`): the seed's
    problem block where the mark line stands, else at the top, after any docstring and `from __future__` lines.
    ValueError (why) when the seed carries no problem or the code defines what the problem defines."""
    m = _PROBLEM_BLOCK.search(seed_source)
    if m is None:
        raise ValueError("the seed carries no problem block to build a candidate around")
    block = m.group(0)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # the answer check says why, at the line the model wrote
    defined = _top_level_names(tree)
    if "kernel_fn.subgraph" in defined:  # the whole file, problem included (e.g. a seed edited as it is)
        return code
    clash = [n for n in _RESERVED if n in defined]
    if clash:
        raise ValueError(f"the code defines {', '.join(clash)}, which the problem defines (the harness puts the "
                       "problem in at the mark line: leave them out)")
    mark = PROBLEM_MARK.format(name=m.group("name"))
    if mark in code:
        return code.replace(mark, block, 1)
    head = 0
    for node in tree.body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(
            node.value.value, str) and node is tree.body[0]
        if not (docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__")):
            break
        head = node.end_lineno or head
    lines = code.splitlines(keepends=True)
    return "".join(lines[:head]) + ("\n" if head else "") + block + "\n\n" + "".join(lines[head:])


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names a module's top level defines or assigns (`kernel_fn.subgraph` for an attribute of one)."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    out.add(n.id)
                elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                    out.add(f"{n.value.id}.{n.attr}")
    return out


def target_name(ops: list[str], taken: set[str]) -> str:
    """`sub_gelu_mul_cumsum`: the chain's operators (short, an identifier), unique in the session."""
    words = [re.sub(r"\W", "", op.removeprefix("aten::").strip("_")) for op in ops]
    base = PREFIX + "_".join(w for w in words if w)[:40].rstrip("_")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _row(row: dict) -> Any:
    return SimpleNamespace(name=row.get("name", ""), shapes=list(row.get("shapes") or []),
                           modules=list(row.get("modules") or []))


def choose(cands: list, row: dict, claimed: set[str], known_ops: set[str]) -> Any | None:
    """The candidate a row becomes: of the nodes the row stands for, the largest single-output candidate
    holding them that shares no node with another target and no operator of a known kernel type."""
    from . import subgraph

    def allowed(c: Any) -> bool:
        return len(c.output_shapes) == 1 and not claimed.intersection(c.nodes) and not known_ops.intersection(c.ops)

    for hit in subgraph.match_row(cands, _row(row)):
        around = [c for c in cands if set(hit.nodes) <= set(c.nodes) and allowed(c)]
        if around:
            return max(around, key=lambda c: len(c.nodes))
    return None


def plan_subgraphs(model_path: str, device: str, size: str | None, rows: list[dict], others: list[int],
                   folder: Path, log: Callable[[str], None], dtype_of: Callable[[Any], str]) -> list[dict]:
    """Plan entries (as `session.plan_targets` makes them, plus `problem` and `nodes`) for the rows `others`
    (indices into `rows`, in Amdahl order) that are worth a kernel: extracted, at most MAX_TARGETS[device].
    Read back from the session's folder when an earlier run planned them."""
    folder = Path(folder)
    stored = folder / PLAN_FILE
    if stored.exists():
        return json.loads(stored.read_text())
    least = MIN_SHARE if device == "cuda" else 0.0  # CPU shares are the interpreter's, not the model's
    worth = [i for i in others if _worth(rows[i], least)]
    if len(worth) < len(others):
        log(f"{len(others) - len(worth)} row(s) of no kernel type with nothing to compute"
            + (f" or under {least:.0%} of the forward" if least else "") + " stay as they are")
    plan = _extract(model_path, device, size, rows, worth, folder, log) if worth else []
    if device == "cuda":  # the captured model and its intermediates are gone: the worker gets the memory back
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()
    for p in plan:
        p["dtype"] = dtype_of(rows[p["row"]].get("target_dtype"))
    folder.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps(plan, indent=2))
    return plan


def _worth(row: dict, least: float) -> bool:
    return float(row.get("share") or 0.0) >= least and row.get("kernel_speedup") is not None \
        and float(row.get("floor_ms") or 0.0) > 0.0


def seed(entry: dict, folder: Path, size: str | None, device: str, log: Callable[[str], None]) -> bool:
    """Give a planned subgraph target its Inductor seed (once; a subprocess, bounded in time); False, with
    the reason logged, when Inductor cannot seed it and the row stays as it is."""
    from .seeding import seed_problem

    folder = Path(folder)
    if entry.get("seed") and Path(entry["seed"]).exists():
        return True
    log(f"{entry['kind']}: asking Inductor for a seed of nodes {entry['nodes']}")
    path, why = seed_problem(entry["problem"], folder / "seeds" / f"{entry['kind']}_seed.py", size,
                             SEED_TIMEOUT_S.get(device, 600.0))
    if path is None:
        log(f"skipping {entry['kind']} (row {entry['row'] + 1}): Inductor could not seed it: {why}")
        return False
    entry["seed"] = str(path)
    stored = folder / PLAN_FILE
    plan = json.loads(stored.read_text()) if stored.exists() else []
    stored.write_text(json.dumps([entry if p["kind"] == entry["kind"] else p for p in plan], indent=2))
    return True


def _extract(model_path: str, device: str, size: str | None, rows: list[dict], others: list[int], folder: Path,
             log: Callable[[str], None]) -> list[dict]:
    """The problems for the first rows of `others` that match nodes of the captured forward."""
    from . import subgraph
    from .model_loading import load_model

    loaded = load_model(model_path, device, size=size)
    try:
        cap = subgraph.capture(loaded.model, list(loaded.inputs))
    except subgraph.SubgraphError as e:
        log(f"rows of no kernel type stay as they are: {e}")
        return []
    if cap.how != "torch.export":  # the swap captures the model with torch.export again: it must work
        log("rows of no kernel type stay as they are: torch.export cannot capture this model, so no kernel "
            "could be put back into it")
        return []
    cands = subgraph.candidates(cap)
    known_ops = {r.get("name") for r in rows if r.get("kind") not in (None, "other") and str(r.get("name")).startswith("aten::")}
    claimed: set[str] = set()
    taken: set[str] = set()
    problems = []
    limit = MAX_TARGETS.get(device, 8)
    for i in others:
        row = rows[i]
        cand = choose(cands, row, claimed, known_ops)
        if cand is None:
            if not any(set(c.nodes) & claimed for c in subgraph.match_row(cands, _row(row))):
                log(f"row {i + 1} ({row.get('name')}) matches no node of the captured forward")
            continue
        if len(problems) >= limit:
            log(f"at most {limit} subgraph targets on {device}: row {i + 1} ({row.get('name')}) and later "
                "ones stay as they are")
            break
        name = target_name(cand.ops, taken)
        try:
            ex = subgraph.write_problem(cap, cand, folder / f"{name}.py", Path(model_path).name)
        except subgraph.SubgraphError as e:
            log(f"skipping row {i + 1} ({row.get('name')}): {e}")
            continue
        kept = ex.saved.stat().st_size if ex.saved else 0
        if kept > MAX_SAVED_BYTES:
            log(f"skipping row {i + 1} ({row.get('name')}): its saved values take {kept / 2**20:.0f} MiB, and every "
                f"candidate of a problem carries them inline (at most {MAX_SAVED_BYTES / 2**20:.0f} MiB)")
            continue
        taken.add(name)
        claimed.update(cand.nodes)
        log(f"row {i + 1} ({row.get('name')}) is target {name}: nodes {cand.name} "
            f"({' + '.join(cand.ops)}) as a problem")
        problems.append({"kind": name, "row": i, "shape": {}, "backend": "triton", "problem": str(ex.path),
                         "nodes": cand.name})
    return problems


class SubgraphSearch(TargetSearch):
    """KernelBench mode's whole-problem search on a subgraph's problem (its brief says how a worker builds it
    and that the seed's knobs are its params); agents see a whole-problem target (`kernel="problem"`)."""

    def __init__(self, ctx: Any, target: Any, spec: Any, problem: str):
        super().__init__(ctx, target, spec)
        self.problem = problem

    def _context(self, seed: Any) -> Any:
        """A whole-problem context that also names Inductor's seed and its measurement (an LLM's prompt shows
        them whatever this round's parent is)."""
        from .problem_spec import PROBLEM_TARGET

        start = self.t.starter
        return replace(super()._context(seed), kernel=PROBLEM_TARGET, problem=self.problem,
                       seed_source=start.source if start else "", seed=start.measurement() if start else None)
