"""Per-turn budgets (wall time, tokens, cost) and token usage accounting.

Defaults come from `Swarm.spec.policy.budget` (`BudgetPolicy`): 1800 s and 1,000,000 tokens
per turn, no cost limit; the step limit is `policy.maxStepsPerTurn`. Time is enforced while
the turn runs (a model or tool call in progress is cancelled); tokens and cost are checked
after each step, before the next model call.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from agentproc.messages import Usage
from goondan.bundle.model import BudgetPolicy, ModelPricing
from goondan.extensions import TokenUsage


class UsageMeter:
    """Tokens of a turn, and their cost when the Model declares `spec.pricing`."""

    def __init__(self, pricing: ModelPricing | None) -> None:
        self.pricing = pricing
        self.input_tokens = 0
        self.output_tokens = 0

    def add(self, usage: Usage) -> TokenUsage:
        """Count one model call; returns that call's usage (with cost)."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        counted = self.usage(usage.input_tokens, usage.output_tokens)
        if usage.cache_read_tokens or usage.cache_creation_tokens:
            counted = msgspec.structs.replace(
                counted,
                cache_read_tokens=usage.cache_read_tokens,
                cache_creation_tokens=usage.cache_creation_tokens,
            )
        return counted

    def total(self) -> TokenUsage:
        return self.usage(self.input_tokens, self.output_tokens)

    def usage(self, input_tokens: int, output_tokens: int) -> TokenUsage:
        cost = None
        if self.pricing is not None:
            cost = round(
                (input_tokens * self.pricing.input + output_tokens * self.pricing.output) / 1e6, 6
            )
        return TokenUsage(input_tokens, output_tokens, cost)


class TurnBudget:
    def __init__(self, policy: BudgetPolicy, started: float | None = None) -> None:
        self.policy = policy
        self.started = time.monotonic() if started is None else started

    @property
    def deadline(self) -> float | None:
        """The loop time (`time.monotonic`) at which the turn is out of time."""
        seconds = self.policy.max_turn_seconds
        return None if seconds is None else self.started + seconds

    def time_message(self) -> str:
        return (
            f"This turn ran out of time: the budget is {self.policy.max_turn_seconds:g} s "
            "(Swarm spec.policy.budget.maxTurnSeconds)."
        )

    def exceeded(self, meter: UsageMeter) -> str | None:
        """Why the turn must stop now (tokens or cost over budget), or None."""
        tokens = meter.input_tokens + meter.output_tokens
        limit = self.policy.max_turn_tokens
        if limit is not None and tokens >= limit:
            return (
                f"This turn used {tokens:,} tokens; the budget is {limit:,} "
                "(Swarm spec.policy.budget.maxTurnTokens)."
            )
        cost_limit = self.policy.max_turn_cost_usd
        if cost_limit is None:
            return None
        cost = meter.total().cost_usd
        if cost is not None and cost >= cost_limit:
            return (
                f"This turn cost ${cost:.4f}; the budget is ${cost_limit:g} "
                "(Swarm spec.policy.budget.maxTurnCostUsd)."
            )
        return None


def usage_data(usage: TokenUsage) -> dict[str, Any]:
    """A call's or a turn's usage as runtime events carry it (`tokenUsage`)."""
    data: dict[str, Any] = {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.input_tokens + usage.output_tokens,
    }
    if usage.cost_usd is not None:
        data["costUsd"] = usage.cost_usd
    if usage.cache_read_tokens or usage.cache_creation_tokens:
        data["cacheReadTokens"] = usage.cache_read_tokens
        data["cacheCreationTokens"] = usage.cache_creation_tokens
    return data
