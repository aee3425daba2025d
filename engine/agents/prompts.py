"""The LLM agent's prompt: everything measured so far, in a compact text a model can act on.

Kept apart from `llm.py` so the prompt can be read, tested and tuned without litellm. The model is
asked for a strict answer format (`TIER:`/`TITLE:`/`HYPOTHESIS:` lines and one fenced ```python
block per variant) that `llm_answers.py` parses.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..problem_spec import MODEL_SEED, ProblemBrief
from .base import TIERS, AgentContext, Measurement, Tried

IDEAS_PER_TIER = 2  # ideas tried at a tier before the prompt points the model at the next one
HISTORY_IDEAS = 30  # the most recent ideas shown in full; older ones are only counted
FAILURE_CHARS = 160  # a failed variant's reason is cut to this many characters

_BACKENDS = {"triton": "Triton kernels (@triton.jit)",
             "cuda": "CUDA C++ kernels built with torch.utils.cpp_extension.load_inline"}

SYSTEM_PROMPT = """\
You are an expert GPU kernel engineer. You write faster kernels (Triton, or CUDA C++ built through \
torch.utils.cpp_extension) for one operation of a PyTorch model. A harness checks every kernel you \
write against a float64 reference over many shapes, dtypes and numerical regimes, then times it \
against PyTorch eager and torch.compile. Only correct kernels count; a faster wrong kernel is worth nothing.

Rules for every candidate file:
- It is one complete, self-contained Python file that defines `kernel_fn` with exactly the given signature.
- It launches its own kernel (a @triton.jit function, or CUDA C++ through torch.utils.cpp_extension). \
It may allocate outputs, make views and copies, but must not call a PyTorch op that computes the \
result (no torch.softmax, torch.matmul, F.layer_norm, ..., and no torch math on the data).
- It handles any shape the spec allows (odd sizes, sizes of 1, non-contiguous inputs), every dtype, \
and never changes its inputs.
- No file, network or process access, no eval/exec.
- For a whole-problem target the file defines the class `ModelNew` described in the notes instead of \
`kernel_fn`; the same rules hold for its forward.

Answer format (strict, nothing else is read):
TIER: <playbook tier number 1-6>
TITLE: <a few words naming the change>
HYPOTHESIS: <one or two sentences: what the measurements show and why this change should be faster>
VARIANT: <short label, e.g. BLOCK_N=2048, num_warps=8>
```python
<the complete candidate file>
```
Repeat VARIANT + code block for more variants of the same idea, and repeat the whole block for more ideas.
"""

RETRY_PROMPT = """\
Your previous answer could not be used: {reason}
Answer again in the required format: TIER:, TITLE:, HYPOTHESIS: lines, then one ```python block per \
variant holding the complete file that defines {signature}."""


def current_tier(history: list[Tried], per_tier: int = IDEAS_PER_TIER) -> int:
    """The lowest tier with fewer than `per_tier` ideas tried (6 once every tier has had its turn)."""
    counts: dict[int, int] = {}
    for t in history:
        counts[t.tier] = counts.get(t.tier, 0) + 1
    for tier in sorted(TIERS):
        if counts.get(tier, 0) < per_tier:
            return tier
    return max(TIERS)


def playbook_pages() -> dict[int, tuple[str, str]]:
    """{tier: (name, Markdown text)} from `autokernel.playbook`; the bare tier names if it is missing."""
    try:
        from autokernel.playbook import tiers
    except ImportError:
        return {n: (name, "") for n, name in TIERS.items()}
    pages = {t.number: (t.name, t.text) for t in tiers()}
    return pages or {n: (name, "") for n, name in TIERS.items()}


def describe_measurement(m: Measurement | None) -> str:
    """One line: verdict, time, % of the device ceiling, speedups."""
    if m is None:
        return "not measured yet"
    if not m.passed:
        return f"FAILED {_cut(m.failure, FAILURE_CHARS)}"
    parts = [f"{m.kernel_ms:.4g} ms" if m.kernel_ms is not None else "passed (no timing)"]
    if m.fraction_of_ceiling is not None:
        parts.append(f"{100 * m.fraction_of_ceiling:.1f}% of the device ceiling")
    if m.speedup_eager is not None:
        parts.append(f"{m.speedup_eager:.3g}x vs eager")
    if m.speedup_compile is not None:
        parts.append(f"{m.speedup_compile:.3g}x vs torch.compile")
    return ", ".join(parts)


def describe_history(history: list[Tried], limit: int = HISTORY_IDEAS) -> str:
    """Ideas already tried, oldest first, one line per variant (failures with stage and reason)."""
    if not history:
        return "(nothing tried yet on this target)"
    shown = history[-limit:]
    lines = []
    if len(history) > len(shown):
        lines.append(f"({len(history) - len(shown)} older ideas not shown)")
    for t in shown:
        lines.append(f"- [tier {t.tier}] {t.title} (on {t.parent_id or 'the starter'}): {_cut(t.hypothesis, 200)}")
        for r in t.results:
            label = r.label or r.candidate_id
            lines.append(f"    {r.candidate_id} {label}: {describe_measurement(r)}")
    return "\n".join(lines)


def spec_section(spec: Any, ctx: AgentContext) -> str:
    """The operation: name, signature, summary, the reference's source, notes, target shape/dtype/device."""
    signature = getattr(spec, "signature", "") or "kernel_fn(...)"
    lines = [
        f"Operation: {getattr(spec, 'name', ctx.kernel)}",
        f"Signature to define: {signature}",
    ]
    if getattr(spec, "summary", ""):
        lines.append(f"Computes: {spec.summary}")
    shape = ", ".join(f"{k}={v}" for k, v in (ctx.shape or {}).items())
    if isinstance(spec, ProblemBrief):
        lines.append(f"Target: the problem's own inputs (get_inputs()), dtype {ctx.dtype}")
    else:
        lines.append(f"Target (from the user's model): shape {shape or '?'}, dtype {ctx.dtype}")
    lines.append(f"Device: {ctx.device_name or ctx.device} ({ctx.device}); backend: {ctx.backend}")
    if ctx.device != "cuda":
        lines.append("(No GPU here: Triton runs under its CPU interpreter, so timings are not meaningful; "
                     "write the kernel you would run on the GPU.)")
    forbidden = sorted(getattr(spec, "forbidden_ops", ()) or ())
    if forbidden:
        lines.append(f"Calling any of these counts as calling the reference: {', '.join(forbidden)}")
    reference = _source_of(getattr(spec, "reference", None))
    if reference:
        lines += ["", "Reference implementation (PyTorch; your kernel must match it):", "```python", reference, "```"]
    if isinstance(spec, ProblemBrief):
        lines += ["", "The problem (PyTorch; ModelNew must match its Model):", "```python", spec.source.rstrip(), "```"]
    if getattr(spec, "notes", ""):
        lines += ["", f"Notes: {spec.notes}"]
    return "\n".join(lines)


def build_prompt(ctx: AgentContext, spec: Any, pages: dict[int, tuple[str, str]] | None = None) -> str:
    """The user message for one `propose` call."""
    pages = playbook_pages() if pages is None else pages
    tier = current_tier(ctx.history)
    name, text = pages.get(tier, (TIERS.get(tier, ""), ""))
    sections = ["# The operation", spec_section(spec, ctx), ""]
    seed_id = ctx.seed.candidate_id if ctx.seed_source and ctx.seed else None
    if ctx.seed_source:
        sections += seed_section(ctx)
    if isinstance(spec, ProblemBrief) and ctx.parent_id == MODEL_SEED:
        sections += ["# The starting point: the problem's Model above (no ModelNew written yet)", ""]
    elif seed_id is not None and ctx.parent_id == seed_id:
        sections += [f"# The parent you build on: Inductor's seed ({seed_id}) above", ""]
    else:
        sections += [f"# The parent kernel ({ctx.parent_id or 'starter'}) you build on",
                     f"Measured: {describe_measurement(ctx.parent_measurement)}"]
        if ctx.parent_params:
            sections.append("Parameters: " + ", ".join(f"{k}={v}" for k, v in ctx.parent_params.items()))
        sections += ["```python", _shown(ctx.parent_source, ctx), "```", ""]
    if ctx.best is not None:
        sections.append(f"Best so far: {ctx.best.candidate_id} {describe_measurement(ctx.best)}")
    if ctx.pool:
        sections.append("Best kernels kept: " + "; ".join(
            f"{cid} ({m.label or 'no label'}): {describe_measurement(m)}" for cid, m in ctx.pool))
    sections += ["", "# Ideas already tried on this target (do not repeat them)", describe_history(ctx.history), ""]
    others = ", ".join(f"{n} {pages.get(n, (TIERS[n], ''))[0]}" for n in sorted(TIERS) if n != tier)
    sections += [f"# Playbook: tier {tier} ({name}) is the current tier", text.strip() or "(no page)",
                 f"Other tiers: {others}. Move to another tier when the measurements point there.", ""]
    if ctx.hint:
        sections += ["# The engineer watching asks", ctx.hint, ""]
    if ctx.seed_source:
        sections += file_section(ctx)
    goal = ("ModelNew faster than Inductor's seed and the parent on the problem's inputs" if ctx.seed_source else
            "ModelNew (one complete file) faster than the problem's Model (and than the parent, if any) on its inputs"
            if isinstance(spec, ProblemBrief) else
            f"{getattr(spec, 'signature', 'kernel_fn')} faster than the parent on the target shape and dtype")
    sections.append(
        f"# Your task (round {ctx.round})\nPropose up to {ctx.max_ideas} new ideas, each with up to "
        f"{ctx.max_variants} variants, that should make {goal} while staying correct. "
        f"Write {_BACKENDS.get(ctx.backend, ctx.backend)}. "
        "Use the answer format exactly.")
    return "\n".join(sections)


def seed_section(ctx: AgentContext) -> list[str]:
    """A subgraph target's start: the Triton Inductor writes for the problem, as a candidate, and its measurement."""
    seed = ctx.seed
    lines = [f"# Inductor's seed ({seed.candidate_id if seed else 'not stored yet'}): the Triton kernels "
             "torch.compile writes for this problem, made a plain candidate file",
             f"Measured: {describe_measurement(seed)}"]
    if seed is not None and seed.params:
        lines.append("Launch settings: " + ", ".join(f"{k}={v}" for k, v in seed.params.items()))
    if "channels_last" in ctx.seed_variants:
        lines.append("Layout: cuDNN runs this problem's convolutions faster channels-last (torch.compile lays 2-d ones "
                     "out so on a GPU; cuDNN computes 3-d ones so and transposes back); the seed keeps the Model's "
                     "layout. cuDNN's channels-last algorithm may round differently: the checks judge it.")
    return lines + ["```python", _shown(ctx.seed_source, ctx), "```", ""]


def file_section(ctx: AgentContext) -> list[str]:
    """What a subgraph target's candidate file holds, and where the problem's own source goes."""
    from ..subgraph_targets import problem_mark

    mark = problem_mark(ctx.seed_source) or "(the problem's source)"
    return ["# The file to write",
            "This problem is a piece of the user's model: your kernel replaces it there. Write your @triton.jit "
            "kernels and `class ModelNew`, whose forward takes the problem's inputs (get_inputs()) and returns what "
            "Model.forward returns. Do not copy the problem: the harness puts its source (Model, SUBGRAPH, "
            "kernel_fn) where this line stands in your file, or at its top when the line is missing, so ModelNew "
            "may subclass Model as the seed does:", mark,
            "Do not define kernel_fn, SUBGRAPH or _BUILT yourself.", ""]


def _shown(source: str, ctx: AgentContext) -> str:
    """A candidate's source as the prompt shows it: a subgraph target's problem folded to its mark line."""
    if not ctx.seed_source:
        return source.rstrip()
    from ..subgraph_targets import fold_problem

    return fold_problem(source).rstrip()


def _source_of(fn: Any) -> str:
    if fn is None:
        return ""
    try:
        return inspect.getsource(fn).rstrip()
    except (OSError, TypeError):
        return ""


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 3] + "..."
