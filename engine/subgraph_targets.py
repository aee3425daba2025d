"""Profile rows of no kernel type as targets of an optimize session: each becomes a subgraph problem.

A row the nine kernel specs do not cover (a cumsum, a GELU, a log-softmax, a conv) is matched to the
nodes of the model's captured ATen graph (engine/subgraph.py), grown to the largest chain around it that
a fused kernel could replace and that no other target holds, written as a KernelBench-form problem in the
session's folder, and seeded from Inductor's Triton (engine/seeding.py) when the session reaches it.
Each is then searched like KernelBench mode's whole-problem target (`SubgraphSearch`), and its winner goes
back into the model through `kernel_fn` and engine/subgraph_patch.py.

Capturing a model and seeding each problem cost seconds to minutes on a CPU, so the session plans these
targets only when its walk down the Amdahl order reaches the first such row with budget left, and seeds each
when it is reached; the plan (seeds included) is kept in `subgraphs/plan.json`, so a resumed session searches
the same problems without capturing or seeding again.
"""

from __future__ import annotations

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
    """KernelBench mode's whole-problem search on a subgraph's problem: the worker builds the problem's
    spec, the seed's knobs are its params, and agents see a whole-problem target (`kernel="problem"`)."""

    def __init__(self, ctx: Any, target: Any, spec: Any, problem: str):
        super().__init__(ctx, target, spec)
        self.whole_problem = True
        self.problem = problem

    def _problem_args(self) -> dict:
        return {"problem": self.problem, "size": self.ctx.size}

    def _context(self, seed: Any) -> Any:
        from .problem_spec import PROBLEM_TARGET

        return replace(super()._context(seed), kernel=PROBLEM_TARGET, problem=self.problem)
