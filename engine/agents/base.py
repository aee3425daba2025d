"""The agent interface: `propose(context) -> list[Idea]`, each idea a hypothesis with code variants.

Agents never run code: they read what was measured (the context) and write source. The search
loop checks, times and keeps or discards what they write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

# The six playbook tiers, in the order the offline agent works through them.
TIERS = {
    1: "block sizes, warps and stages",
    2: "memory access",
    3: "compute",
    4: "advanced algorithms",
    5: "architecture-specific",
    6: "kernel-specific tricks",
}


@dataclass
class Variant:
    """One concrete source file for an idea (e.g. the same change at three block sizes)."""

    source: str
    label: str = ""  # short, e.g. "BLOCK_N=2048, num_warps=8"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Idea:
    tier: int
    title: str
    hypothesis: str  # grounded in a measurement: "71% of bandwidth with 4 warps ...: more warps should ..."
    variants: list[Variant]
    parent_id: str | None = None

    @property
    def tier_name(self) -> str:
        return TIERS.get(self.tier, "")


@dataclass
class Measurement:
    """What is known of one candidate: its verdict and, if it passed, its timing."""

    candidate_id: str
    label: str
    passed: bool
    failure: str = ""  # stage and reason when it failed
    kernel_ms: float | None = None
    fraction_of_ceiling: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Tried:
    """An idea already tried and how its variants fared (so agents don't repeat themselves)."""

    tier: int
    title: str
    hypothesis: str
    parent_id: str | None
    results: list[Measurement]


@dataclass
class AgentContext:
    """Everything an agent may read when it proposes the next round."""

    kernel: str  # spec name
    backend: str  # triton | cuda
    device: str  # cpu | cuda
    device_name: str
    shape: dict  # the target shape (from the user's model)
    dtype: str
    parent_id: str | None  # the seed this round builds on
    parent_source: str
    parent_params: dict[str, Any]
    parent_measurement: Measurement | None
    best: Measurement | None  # best so far for this target
    pool: list[tuple[str, Measurement]]  # (candidate_id, measurement) of the best few kernels
    history: list[Tried]  # every idea tried on this target, oldest first
    round: int
    max_ideas: int = 3
    max_variants: int = 3
    hint: str = ""  # anything the person typed to steer the agent
    problem: str = ""  # the problem file, for a whole-problem target (kernel "problem": write all of ModelNew)
    # A subgraph target's start, Inductor's seed (engine/subgraph_targets.py), whatever this round's parent is:
    # its source (the problem inside it verbatim) and what it measured.
    seed_source: str = ""
    seed: Measurement | None = None
    # Other Inductor seeds of the same problem ({name: source}, e.g. its convolutions channels-last): whole
    # alternatives to the seed the parent comes from, which a move may offer as they are.
    seed_variants: dict[str, str] = field(default_factory=dict)


class Agent(Protocol):
    name: str

    def propose(self, context: AgentContext) -> list[Idea]:
        ...
