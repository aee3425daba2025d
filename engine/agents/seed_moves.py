"""The playbook's moves over an Inductor seed: the seed's variants (its convolutions channels-last), one
candidate that autotunes its kernels over the configs Inductor would have timed, those configs one by one,
then its launch knobs, one per idea, halved and doubled.

An Inductor seed (engine/inductor_seed.py) writes every launch setting as a module constant
(`K0_XBLOCK = 64`, `K0_R0_BLOCK`, `K0_WARPS`, `K0_STAGES`), so a move is a one-line change and the
whole-problem search can tune a problem of any kind the way the templates tune the nine kernel types.
Deterministic like the rest of the playbook: block sizes before warps before stages, kernels in order,
knobs that missed `PATIENCE` times in a row last, nothing tried twice, no move past a kernel's extent,
no stages for a kernel without a loop. A kernel the parent already autotunes gets no config or knob move:
its autotuner times those configs itself, from whatever its constants say first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..seed_autotune import autotune_seed, autotuned_kernels, listed_configs
from .base import AgentContext, Idea, Variant

KNOB_LINE = re.compile(r"^(K(\d+)_([A-Z0-9_]+)) = (\d+)$", re.M)
MAX_BLOCK = {"X": 4096, "Y": 1024, "Z": 1024, "R": 4096}  # Inductor's own TRITON_MAX_BLOCK
WARPS = (1, 2, 4, 8, 16, 32)
STAGES = (1, 2, 3, 4)
KIND_ORDER = {"block": 0, "warps": 1, "stages": 2}
AUTOTUNE = "autotune"  # the param that marks a seed whose listed configs Triton's autotuner times
VARIANT = "variant"  # the param that names the seed variant a candidate started from
VARIANT_REASONS = {
    "channels_last": ("cuDNN runs these convolutions faster channels-last: torch.compile, on a GPU, lays 2-d ones "
                      "out so where Inductor's heuristic expects a gain (for a copy in and out), and a 3-d one, "
                      "which it leaves, cuDNN computes channels-last anyway and transposes back, a whole pass over "
                      "its output. This is Inductor's code with the convolutions channels-last, its kernels "
                      "autotuned as well. cuDNN's channels-last algorithm may round differently: the checks keep "
                      "it only within the problem's tolerance"),
}
REASONS = {
    ("block", "up"): "each program takes twice the elements, so half as many programs run (less per-program "
                     "index math and launch overhead, wider loads) at the cost of registers per thread",
    ("block", "down"): "each program takes half the elements, so twice as many run: more parallelism where the "
                       "grid is small, fewer registers per thread",
    ("warps", "up"): "more threads per program keep more loads in flight for the same block",
    ("warps", "down"): "fewer threads per program: less cross-warp synchronisation in reductions and more "
                       "programs resident per SM",
    ("stages", "up"): "a deeper software pipeline overlaps the next loads of a loop with this step's math",
    ("stages", "down"): "a shallower pipeline frees shared memory and registers for more resident programs",
}


@dataclass(frozen=True)
class SeedKnob:
    name: str  # "K0_XBLOCK"
    kernel: int  # 0
    kind: str  # block | warps | stages
    values: tuple  # what it may take, in order
    value: int


def seed_knobs(source: str) -> dict[str, int]:
    """The launch constants a seed exposes, {"K0_XBLOCK": 64, ...} ({} for a file that is not a seed)."""
    return {m.group(1): int(m.group(4)) for m in KNOB_LINE.finditer(source)}


def _kernel_text(source: str, index: int) -> str:
    """The part of the seed between kernel `index`'s constants and the next kernel's (its jit functions)."""
    start = re.search(rf"^K{index}_", source, re.M)
    if start is None:
        return ""
    nxt = re.search(rf"^(K{index + 1}_|class ModelNew\b)", source[start.start():], re.M)
    return source[start.start(): start.start() + nxt.start()] if nxt else source[start.start():]


def _extent(text: str, axis: str) -> int | None:
    """A kernel's static extent along an axis (`xnumel = 64`), or None when it is dynamic."""
    var = f"{axis.lower()}numel" if len(axis) == 1 else f"{axis.lower()}_numel"  # xnumel, r0_numel
    m = re.search(rf"^\s*{var} = (\d+)$", text, re.M)
    return int(m.group(1)) if m else None


def knob_space(source: str) -> list[SeedKnob]:
    """Every knob of a seed with the values a move may give it."""
    out = []
    for name, value in seed_knobs(source).items():
        m = re.match(r"K(\d+)_(.+)", name)
        index, what = int(m.group(1)), m.group(2)
        text = _kernel_text(source, index)
        if what == "WARPS":
            out.append(SeedKnob(name, index, "warps", WARPS, value))
        elif what == "STAGES" and re.search(r"^\s+for .+ in ", text, re.M):  # pipelining needs a loop
            out.append(SeedKnob(name, index, "stages", STAGES, value))
        elif what.endswith("BLOCK") and value > 0 and value & (value - 1) == 0:
            axis = what[:-len("BLOCK")].rstrip("_")  # X, Y, Z, R0, R1
            top = MAX_BLOCK.get(axis[:1], 1024)
            extent = _extent(text, axis)
            if extent:
                top = min(top, max(1 << (extent - 1).bit_length(), value))  # past the extent: all masked
            low = 16 if "tl.dot(" in text else 1  # tl.dot needs 16 or more on every side
            values, v = [], min(low, value)
            while v <= max(top, value):
                values.append(v)
                v *= 2
            out.append(SeedKnob(name, index, "block", tuple(values), value))
    return out


def with_knob(source: str, name: str, value: int) -> str:
    return re.sub(rf"^{re.escape(name)} = \d+$", f"{name} = {value}", source, count=1, flags=re.M)


def other_configs(source: str) -> dict[int, list[dict[str, int]]]:
    """Per kernel, the heuristic's other launch configs the seed lists, as its constants: {0: [{"K0_XBLOCK": 1,
    ...}]}; only configs that name constants the seed has."""
    knobs = seed_knobs(source)
    out: dict[int, list[dict[str, int]]] = {}
    for index, configs in listed_configs(source).items():
        for config in configs:
            named = {f"K{index}_{k}": v for k, v in config.items()}
            if named and set(named) <= set(knobs) and all(isinstance(v, int) for v in named.values()):
                out.setdefault(index, []).append(named)
    return out


def _autotune_idea(ctx: AgentContext, parent: dict, tried: set[str]) -> list[Idea]:
    """The whole seed autotuned over its kernels' listed configs, as one variant (once per parent)."""
    params = {**parent, AUTOTUNE: True}
    if parent.get(AUTOTUNE) or _key(params) in tried:
        return []
    autotuned = autotune_seed(ctx.parent_source)
    if not autotuned.kernels:
        return []
    listed = other_configs(ctx.parent_source)
    counts = ", ".join(f"{len(listed.get(i, [])) + 1} for kernel {i}" for i in autotuned.kernels)
    names = ", ".join(f"K{i}" for i in autotuned.kernels)
    measured = _measured(ctx, None, at="each kernel's first config")
    hypothesis = (f"{measured}: Inductor's heuristic lists launch configurations ({counts}) and torch.compile, "
                  f"on a GPU, times them all and keeps the fastest; the seed starts from the first, untimed. "
                  f"Triton's autotuner over the same list, the seed's constants first, does that timing in one "
                  f"candidate. {_autotune_expectation(ctx)}")
    variant = Variant(source=autotuned.source, label=f"autotune {names}", params=params)
    return [Idea(tier=1, title=f"Autotune {names} over Inductor's launch configs", hypothesis=hypothesis,
                 variants=[variant], parent_id=ctx.parent_id)]


def _variant_ideas(ctx: AgentContext, tried_params: list[dict]) -> list[Idea]:
    """Each seed variant not yet started from, as it is (autotuned where its kernels list configs): one idea each."""
    started = {params.get(VARIANT) for params in tried_params}
    ideas = []
    for name, source in sorted(ctx.seed_variants.items()):
        if name in started:
            continue
        autotuned = autotune_seed(source)
        source = autotuned.source if autotuned.kernels else source
        params = {**seed_knobs(source), **({AUTOTUNE: True} if autotuned.kernels else {}), VARIANT: name}
        why = VARIANT_REASONS.get(name, f"another seed of the same problem ({name})")
        hypothesis = f"{_measured(ctx, None, at='its layout')}: {why}."
        ideas.append(Idea(tier=1, title=f"Start from the seed's {name.replace('_', '-')} variant",
                          hypothesis=hypothesis, variants=[Variant(source=source, label=name, params=params)],
                          parent_id=ctx.parent_id))
    return ideas


def _config_ideas(ctx: AgentContext, parent: dict, tried: set[str]) -> list[Idea]:
    """One idea per kernel (not autotuned) whose other heuristic configs are untried: each config as a variant."""
    ideas = []
    autotuned = autotuned_kernels(ctx.parent_source)
    for index, configs in sorted(other_configs(ctx.parent_source).items()):
        if index in autotuned:
            continue
        fresh = [c for c in configs if _key({**parent, **c}) not in tried][: max(ctx.max_variants, 1)]
        if not fresh:
            continue
        variants = []
        for config in fresh:
            source = ctx.parent_source
            for name, value in config.items():
                source = with_knob(source, name, value)
            label = ", ".join(f"{k}={v}" for k, v in config.items() if parent.get(k) != v)
            variants.append(Variant(source=source, label=label, params={**parent, **config}))
        hypothesis = (f"{_measured(ctx, None, index)}: Inductor's heuristic lists {len(configs) + 1} launch "
                      f"configurations for kernel {index} and, on a GPU, times them all and keeps the fastest; the "
                      f"seed starts from the first, so the others come before any single-knob move. "
                      f"{_expectation(ctx)}")
        ideas.append(Idea(tier=1, title=f"K{index}: Inductor's other launch configs ({len(fresh)})",
                          hypothesis=hypothesis, variants=variants, parent_id=ctx.parent_id))
    return ideas


def _neighbours(knob: SeedKnob) -> list[tuple[str, int]]:
    """The doubled and the halved value (the next ones up and down the knob's values), up first."""
    values = list(knob.values)
    if knob.value not in values:
        return []
    i = values.index(knob.value)
    return [(d, values[j]) for d, j in (("up", i + 1), ("down", i - 1)) if 0 <= j < len(values)]


def _key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def propose_seed_moves(ctx: AgentContext, patience: int, known: dict, misses: dict) -> list[Idea]:
    """Ideas over the parent seed: first each kernel's other heuristic configs, then one idea per knob with its
    doubled and halved values; only untried ones."""
    knobs = knob_space(ctx.parent_source)
    if not knobs:
        return []
    autotuned = autotuned_kernels(ctx.parent_source)
    parent = {**seed_knobs(ctx.parent_source), **({AUTOTUNE: True} if autotuned else {})}
    tried_params = [m.params for t in ctx.history for m in t.results if m.params]
    tried_params += [m.params for _, m in ctx.pool if m.params]
    tried = {_key(params) for params in tried_params} | {_key(parent)}
    knobs = [k for k in knobs if k.kernel not in autotuned]  # its autotuner times those configs itself
    order = sorted(knobs, key=lambda k: (misses.get(k.name, 0) >= patience, KIND_ORDER[k.kind], k.kernel,
                                         misses.get(k.name, 0), k.name))
    ideas = (_variant_ideas(ctx, tried_params) + _autotune_idea(ctx, parent, tried)
             + _config_ideas(ctx, parent, tried))[: max(ctx.max_ideas, 0)]
    for knob in order:
        if len(ideas) >= max(ctx.max_ideas, 0):
            break
        moves = [(d, v) for d, v in _neighbours(knob) if _key({**parent, knob.name: v}) not in tried]
        moves = moves[: max(ctx.max_variants, 1)]
        if not moves:
            continue
        variants = [Variant(source=with_knob(ctx.parent_source, knob.name, v), label=f"{knob.name}={v}",
                            params={**parent, knob.name: v}) for _, v in moves]
        why = REASONS[(knob.kind, moves[0][0])]
        also = f" (also trying {', '.join(str(v) for _, v in moves[1:])})" if len(moves) > 1 else ""
        hypothesis = (f"{_measured(ctx, knob)}: {why}{also}. {_expectation(ctx)}")
        title = f"{knob.name}: {knob.value} -> {' / '.join(str(v) for _, v in moves)}"
        ideas.append(Idea(tier=1, title=title, hypothesis=hypothesis, variants=variants, parent_id=ctx.parent_id))
    return ideas


def _measured(ctx: AgentContext, knob: SeedKnob | None, kernel: int = 0, at: str = "") -> str:
    m = ctx.parent_measurement
    at = at or (f"{knob.name}={knob.value}" if knob else f"kernel {kernel}'s first config")
    head = f"the Inductor-seeded ModelNew ({ctx.dtype}) with {at}"
    if m is None or m.kernel_ms is None:
        return f"{head}: not timed yet"
    where = "" if ctx.device == "cuda" else " (CPU interpreter: not a GPU number)"
    vs = f", {m.speedup_eager:.2f}x eager" if m.speedup_eager else ""
    return f"{head}: {m.kernel_ms:.4g} ms{vs}{where}"


def _autotune_expectation(ctx: AgentContext) -> str:
    if ctx.device != "cuda":
        return ("Under the interpreter there is nothing to time by: the file runs each kernel's first config, as "
                "the parent does; the move is made for a GPU, and the checks keep it only if it stays correct.")
    return ("It times them on its first call (a warm-up, before any timed one) and keeps its choice, so the "
            "timed calls run the fastest config; what a kernel writes in place is restored between its runs.")


def _expectation(ctx: AgentContext) -> str:
    if ctx.device != "cuda":
        return ("Under the interpreter only the number of programs shows in the time; the move is made for its "
                "effect on a GPU, and the checks keep it only if it stays correct.")
    return "Inductor picked this value by heuristic, not by measurement here: the timing says whether it pays."

