"""What this agent process has done, counted for `goondan run --metrics`.

The counts are cumulative since the process started. They ride on the heartbeat (at most one
per heartbeat interval, and only when a count changed), never on a message of their own per
turn; the orchestrator keeps the totals across respawns (`orchestrator.metrics`). One agent
per process, so one module-level `COUNTERS`.
"""

from __future__ import annotations

from ipc import wire


class Counters:
    __slots__ = ("model", "llm", "tokens", "tools", "changed")

    def __init__(self, model: str = "") -> None:
        self.reset(model)

    def reset(self, model: str) -> None:
        """Start from zero: a forked agent does not inherit the template's warm-up turns."""
        self.model = model  # the agent's Model (`spec.model`)
        self.llm: dict[str, int] = {}  # outcome ("ok" | "error") -> model calls
        self.tokens: dict[str, int] = {}  # direction ("input" | "output") -> tokens
        self.tools: dict[tuple[str, str], int] = {}  # (tool, outcome) -> calls
        self.changed = False  # since the last report

    def model_call(self, outcome: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
        self.llm[outcome] = self.llm.get(outcome, 0) + 1
        if input_tokens:
            self.tokens["input"] = self.tokens.get("input", 0) + input_tokens
        if output_tokens:
            self.tokens["output"] = self.tokens.get("output", 0) + output_tokens
        self.changed = True

    def tool_call(self, tool: str, outcome: str) -> None:
        key = (tool, outcome)
        self.tools[key] = self.tools.get(key, 0) + 1
        self.changed = True

    def report(self, pid: int) -> wire.Heartbeat:
        """The counts so far, for the next heartbeat; clears `changed`."""
        self.changed = False
        return wire.Heartbeat(
            pid,
            self.model,
            dict(self.llm),
            dict(self.tokens),
            [(tool, outcome, n) for (tool, outcome), n in self.tools.items()],
        )


COUNTERS = Counters()

__all__ = ["COUNTERS", "Counters"]
