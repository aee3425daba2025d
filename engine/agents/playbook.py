"""The offline agent: walks the six playbook tiers over a kernel type's template space.

No network, no randomness: the same context always gives the same ideas, so a run can be
replayed and compared. Each idea moves one knob of the parent's params (a few values of it are
the idea's variants); the hypothesis says what the parent measured and why the move could pay.

How the tiers are walked: a tier stays open until `PATIENCE` of its ideas in a row fail to beat
their parent, and a knob goes stale the same way. Moves are ordered: near values (within `NEAR`
steps) before far ones, open tiers before closed ones, fresh knobs before stale ones, then by tier
and by the template's own order of likely payoff; the first `max_ideas` knobs become the ideas.
When the parent is a new best that came from tier t, one lower tier gets one more idea around it
(a structural change can move the best warp count). A move that is a no-op at the target shape
(e.g. a tile cap above the row width) is not an experiment, and nothing already tried is repeated.
When no single-knob move is left, `propose` returns [] and the loop moves on.
"""

from __future__ import annotations

import json
from typing import Any

from autokernel.playbook.templates import Knob, complete, effective, get_template

from ..problem_spec import PROBLEM_TARGET
from .base import AgentContext, Idea, Measurement, Tried, Variant
from .seed_moves import propose_seed_moves

PATIENCE = 2  # ideas in a row that did not pay before a tier is left behind
GAIN = 0.01  # a move "paid" if it beat its parent by more than this fraction
NEAR = 2  # values of an ordered knob within this many steps are tried before farther ones


class _Fields(dict):
    """Format fields for hypothesis text; a field the shape lacks reads as '?'."""

    def __missing__(self, key: str) -> str:
        return "?"


class PlaybookAgent:
    """`propose(ctx) -> list[Idea]` from the playbook templates (see module docstring)."""

    name = "playbook"
    tunes_seeds = True  # a KernelBench problem of no known kernel type: the session seeds it from Inductor

    def propose(self, ctx: AgentContext) -> list[Idea]:
        if ctx.backend != "triton":
            raise ValueError(f"playbook has no moves for {ctx.kernel} on the {ctx.backend} backend (it writes Triton)")
        if ctx.kernel == PROBLEM_TARGET:  # a whole problem: the knobs of the Inductor seed it started from
            known = _known(ctx)
            return propose_seed_moves(ctx, PATIENCE, known, _knob_misses(ctx, known))
        template = get_template(ctx.kernel)  # ValueError: playbook has no template for this kernel
        tried = _tried_keys(template, ctx)
        params = ctx.parent_params
        if not _is_template_params(template, params):
            starter = _is_the_starter(template, ctx.parent_source)
            entry = self._enter_template(template, ctx, tried, starter)
            if entry or not starter:
                return entry
            params = template.DEFAULTS  # the starter is the template at its defaults: its knobs move from there
        parent = complete(template, params)
        moves = self._moves(template, ctx, parent, tried)
        return moves[: max(ctx.max_ideas, 0)]

    # -- the first step: from a starter (or foreign code) into the template family ----------------
    def _enter_template(self, template: Any, ctx: AgentContext, tried: set[str], starter: bool) -> list[Idea]:
        """The first idea from a parent with no template params: the starter (the template at its defaults) or
        foreign code moved into the template family, with first guesses of the launch shape."""
        base = dict(template.DEFAULTS)
        if starter:
            tried = tried | {_key(template, base, ctx.shape, ctx.dtype)}  # the parent itself
        starts = [base]
        if "rows_per_program" in base and _width(ctx.shape):
            # Row kernels: spread the first guesses over the two moves that most often decide them.
            warps = _warps_for_width(_width(ctx.shape), ctx.dtype)
            sized = {**base, "num_warps": warps}
            starts = [sized, {**sized, "num_warps": min(warps * 2, 32)}]
            starts += [{**sized, "rows_per_program": 2}, {**sized, "num_warps": max(warps // 2, 1)}, base]
        elif "num_warps" in base:
            knob = next(k for k in template.SPACE if k.name == "num_warps")
            starts += [{**base, "num_warps": v} for _, v in _neighbours(knob, base["num_warps"])[:2]]
        allowed = {k.name: k.values for k in template.SPACE}
        variants, seen = [], set()
        for params in starts:
            if any(v not in allowed[k] for k, v in params.items()):
                continue
            key = _key(template, params, ctx.shape, ctx.dtype)
            if key in tried or key in seen:
                continue
            seen.add(key)
            changed = [f"{k}={_show(v)}" for k, v in params.items() if v != base[k]]
            label = "template defaults" + (", " + ", ".join(changed) if changed else "")
            variants.append(Variant(source=template.render(params), label=label, params=dict(params)))
            if len(variants) >= max(ctx.max_variants, 1):
                break
        if not variants or ctx.max_ideas <= 0:
            return []
        where = _measured(ctx, template)
        width = _width(ctx.shape) or "?"
        if starter:
            hypothesis = (f"{where}. The parent is the starter, the {ctx.kernel} template at its defaults: this idea "
                          f"tries first guesses of the launch shape for {width}-wide rows, so later rounds tune one "
                          f"knob at a time from whichever is best.")
            title = f"First launch shapes for the {ctx.kernel} starter"
        else:
            hypothesis = (
                f"{where}. The parent is not from the playbook's {ctx.kernel} template, so there are no knobs to move "
                f"yet: this idea moves to the template family (its defaults and, for row kernels, first guesses of the "
                f"launch shape for {width}-wide rows), so later rounds can tune it one knob at a time.")
            title = f"Move from the starter to the playbook {ctx.kernel} template"
        return [Idea(tier=1, title=title, hypothesis=hypothesis, variants=variants, parent_id=ctx.parent_id)]

    # -- later steps: one knob per idea, tiers walked by what paid -------------------------------
    def _moves(self, template: Any, ctx: AgentContext, parent: dict, tried: set[str]) -> list[Idea]:
        knobs: list[Knob] = list(template.SPACE)
        known = _known(ctx)
        closed = _closed_tiers(ctx, known)
        misses = _knob_misses(ctx, known)
        parent_key = _key(template, parent, ctx.shape, ctx.dtype)
        by_knob: dict[str, list[dict]] = {}
        far: set[str] = set()
        for knob in knobs:
            seen = {parent_key}
            near, rest = [], []
            for distance, value in _neighbours(knob, parent[knob.name]):
                params = {**parent, knob.name: value}
                key = _key(template, params, ctx.shape, ctx.dtype)
                if key in tried or key in seen:
                    continue
                seen.add(key)
                (near if distance <= NEAR else rest).append(params)
            if near or rest:
                by_knob[knob.name] = near or rest
                if not near:
                    far.add(knob.name)
        if not by_knob:
            return []  # every single-knob move from this parent has been tried
        index = {k.name: i for i, k in enumerate(knobs)}
        order = sorted(
            (k for k in knobs if k.name in by_knob),
            key=lambda k: (k.name in far, k.tier in closed, misses.get(k.name, 0) >= PATIENCE, k.tier,
                           misses.get(k.name, 0), index[k.name]),
        )
        start = order[0].tier
        revisit = _revisit_knobs(ctx, order, start)
        if revisit:
            order = [order[0], *revisit, *[k for k in order[1:] if k not in revisit]]
        order = _steer(order, ctx.hint)
        ideas = []
        for knob in order[: max(ctx.max_ideas, 0)]:
            steps = by_knob[knob.name][: max(ctx.max_variants, 1)]
            ideas.append(self._idea(template, ctx, parent, knob, steps, revisit=knob in revisit))
        return ideas

    def _idea(self, template: Any, ctx: AgentContext, parent: dict, knob: Knob, steps: list[dict], revisit: bool) -> Idea:
        old = parent[knob.name]
        news = [s[knob.name] for s in steps]
        fields = _Fields({**{k: v for k, v in ctx.shape.items()}, "width": _width(ctx.shape) or "?",
                          "old": _in_words(template, knob, old), "new": _in_words(template, knob, news[0])})
        why = knob.reason(old, news[0]).format_map(fields)
        if len(news) > 1:
            why += f" (also trying {', '.join(_show_knob(template, knob, v) for v in news[1:])})"
        again = " Revisited around the new best, since the last change can move its best value." if revisit else ""
        hypothesis = f"{_measured(ctx, template, knob.name, _show_knob(template, knob, old))}: {why}. {_expectation(ctx)}{again}"
        title = f"{knob.name}: {_show_knob(template, knob, old)} -> {' / '.join(_show_knob(template, knob, v) for v in news)}"
        variants = [Variant(source=template.render(s), label=f"{knob.name}={_show(s[knob.name])}", params=dict(s))
                    for s in steps]
        return Idea(tier=knob.tier, title=title, hypothesis=hypothesis, variants=variants, parent_id=ctx.parent_id)


# -- what has been tried, and what paid ----------------------------------------------------------
def _key(template: Any, params: dict, shape: dict, dtype: str) -> str:
    """Params as they act at the target shape and dtype, as a stable string (no-op differences match)."""
    return json.dumps(effective(template, params, shape, dtype), sort_keys=True, default=str)


def _is_the_starter(template: Any, source: str) -> bool:
    """Whether `source` is the kernel type's starter, which is its template at the defaults."""
    return bool(source) and source == template.render(template.DEFAULTS)


def _is_template_params(template: Any, params: dict) -> bool:
    return bool(params) and set(params) <= set(template.DEFAULTS)


def _tried_keys(template: Any, ctx: AgentContext) -> set[str]:
    keys = set()
    for tried in ctx.history:
        for m in tried.results:
            if _is_template_params(template, m.params):
                keys.add(_key(template, m.params, ctx.shape, ctx.dtype))
    for _, m in ctx.pool:
        if _is_template_params(template, m.params):
            keys.add(_key(template, m.params, ctx.shape, ctx.dtype))
    return keys


def _known(ctx: AgentContext) -> dict[str, Measurement]:
    out: dict[str, Measurement] = {}
    for tried in ctx.history:
        for m in tried.results:
            out[m.candidate_id] = m
    for cid, m in ctx.pool:
        out[cid] = m
    for m in (ctx.best, ctx.parent_measurement):
        if m is not None:
            out[m.candidate_id] = m
    return out


def _paid(tried: Tried, known: dict[str, Measurement]) -> bool:
    parent = known.get(tried.parent_id or "")
    times = [m.kernel_ms for m in tried.results if m.passed and m.kernel_ms]
    if not times or parent is None or not parent.kernel_ms:
        return False
    return min(times) < parent.kernel_ms * (1 - GAIN)


def _closed_tiers(ctx: AgentContext, known: dict[str, Measurement]) -> set[int]:
    """Tiers whose last PATIENCE ideas (since the tier last paid) all failed to beat their parent."""
    misses: dict[int, int] = {}
    for tried in ctx.history:
        if not tried.results:
            continue
        misses[tried.tier] = 0 if _paid(tried, known) else misses.get(tried.tier, 0) + 1
    return {t for t, n in misses.items() if n >= PATIENCE}


def _knob_misses(ctx: AgentContext, known: dict[str, Measurement]) -> dict[str, int]:
    """Per knob, the ideas in a row (since it last paid) that moved it without beating the parent."""
    out: dict[str, int] = {}
    for tried in ctx.history:
        parent = known.get(tried.parent_id or "")
        if parent is None or not tried.results:
            continue
        moved = {k for m in tried.results for k in set(m.params) | set(parent.params)
                 if m.params.get(k) != parent.params.get(k)}
        if len(moved) != 1:
            continue  # not a one-knob move (e.g. the step into the template)
        knob = moved.pop()
        out[knob] = 0 if _paid(tried, known) else out.get(knob, 0) + 1
    return out


def _revisit_knobs(ctx: AgentContext, knobs: list[Knob], start: int) -> list[Knob]:
    """One knob of each lower tier around a parent that is a new best from a higher tier."""
    origin = next((t for t in ctx.history if any(m.candidate_id == ctx.parent_id for m in t.results)), None)
    is_best = ctx.best is not None and ctx.best.candidate_id == ctx.parent_id
    if origin is None or not is_best or origin.tier <= 1:
        return []
    done = {t.tier for t in ctx.history if t.parent_id == ctx.parent_id}
    out = []
    for tier in range(1, origin.tier):
        if tier in done or tier == start:
            continue
        knob = next((k for k in knobs if k.tier == tier), None)
        if knob is not None:
            out.append(knob)
    return out[:1]


def _steer(order: list[Knob], hint: str) -> list[Knob]:
    """A person's hint that names a knob or 'tier N' puts those moves first."""
    text = (hint or "").lower()
    if not text:
        return order
    wanted = [k for k in order if k.name in text or f"tier {k.tier}" in text]
    return wanted + [k for k in order if k not in wanted]


# -- describing what was measured ----------------------------------------------------------------
def _neighbours(knob: Knob, current: Any) -> list[tuple[int, Any]]:
    """(distance, value) for the other values of a knob, nearest first (upward first on ties);
    categorical knobs have every other value at distance 1."""
    values = list(knob.values)
    if current not in values or not knob.ordered:
        return [(1, v) for v in values if v != current]
    i = values.index(current)
    out = []
    for d in range(1, len(values)):
        for j in (i + d, i - d):
            if 0 <= j < len(values):
                out.append((d, values[j]))
    return out


def _width(shape: dict) -> int:
    for key in ("cols", "vocab", "head_dim", "N", "hidden"):
        if key in shape:
            return int(shape[key])
    return 0


def _warps_for_width(width: int, dtype: str) -> int:
    """The usual first guess of warps for a row `width` wide held in registers (4 up to 2K elements,
    8 up to 8K, 16 up to 32K, then 32): enough threads for the row, 8 to 32 values each."""
    if width <= 2048:
        return 4
    if width <= 8192:
        return 8
    if width <= 32768:
        return 16 if width <= 16384 else 32
    return 32


def _shape_text(shape: dict) -> str:
    if "rows" in shape:
        rest = [k for k in shape if k != "rows"]
        return f"{shape['rows']}x{'x'.join(str(shape[k]) for k in rest)} ({', '.join(['rows', *rest])})"
    return ", ".join(f"{k}={v}" for k, v in shape.items())


def _measured(ctx: AgentContext, template: Any, knob: str | None = None, shown: str = "") -> str:
    """"rmsnorm on 8192x4096 (rows, cols) bf16 with num_warps=4: 71% of copy bandwidth, 0.123 ms" (`shown`:
    the knob's value as the hypothesis writes it)."""
    m = ctx.parent_measurement
    ceiling = "copy bandwidth" if template.METRIC == "GB/s" else "matmul peak"
    setting = f" with {knob}={shown}" if knob else ""
    on = f" on {_shape_text(ctx.shape)} {ctx.dtype}" if ctx.shape else f" ({ctx.dtype})"
    head = f"{ctx.kernel}{on}{setting}"
    if m is None or m.kernel_ms is None:
        return f"{head}: not timed yet"
    frac = f"{_percent(m.fraction_of_ceiling)} of {ceiling}, " if m.fraction_of_ceiling is not None else ""
    where = "" if ctx.device == "cuda" else " (CPU interpreter: not a GPU number)"
    return f"{head}: {frac}{m.kernel_ms:.4g} ms{where}"


def _percent(f: float) -> str:
    return f"{f:.0%}" if f >= 0.01 or f == 0 else f"{f * 100:.2g}%"


def _expectation(ctx: AgentContext) -> str:
    m = ctx.parent_measurement
    if ctx.device != "cuda":
        return "The interpreter's timing cannot judge this move; it is made for its effect on a GPU."
    if m is None or m.fraction_of_ceiling is None:
        return "Expect the timing to say whether it pays."
    f = m.fraction_of_ceiling
    if f < 0.6:
        return f"At {f:.0%} of the ceiling there is a lot of headroom, so a change in parallelism or bytes in flight should show clearly."
    if f < 0.85:
        return f"At {f:.0%} the remaining gap is mostly latency hiding and tail effects; expect a few to ten percent if this addresses them."
    return f"At {f:.0%} the kernel is near the ceiling: expect a few percent at most."


STARTERS_CHOICE = "the starter's choice"


def _in_words(template: Any, knob: Knob, value: Any) -> Any:
    """A knob's value as a person reads it: the starter's own 0 or None (its code decides, by shape or path)
    as words, so a hypothesis never says "8 warps instead of 0"; any other value as it is."""
    default = template.DEFAULTS.get(knob.name)
    if (value is None and default is None) or (type(value) is int and value == 0 and type(default) is int and default == 0):
        return STARTERS_CHOICE
    return value


def _show_knob(template: Any, knob: Knob, value: Any) -> str:
    shown = _in_words(template, knob, value)
    return shown if shown is STARTERS_CHOICE else _show(value)


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)
