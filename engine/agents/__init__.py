"""Agents that propose kernels: `playbook` (offline, default) and `llm` (any litellm model)."""

from .base import TIERS, Agent, AgentContext, Idea, Measurement, Tried, Variant

__all__ = ["TIERS", "Agent", "AgentContext", "Idea", "Measurement", "Tried", "Variant"]
