"""A scripted model and a one-call way to run turns, for the loop's unit tests.

The model is a queue of replies (or `ModelError`s); every request it received is kept, so a
test can read what the next LLM call carried.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentproc.catalog import ToolPolicy
from agentproc.extensions import EventBus
from agentproc.instance import Instance
from agentproc.messages import ModelError, ModelReply, ModelRequest, ToolCall, Usage
from agentproc.runtime_events import event_decoder
from agentproc.tool_registry import ToolEntry, ToolRegistry, make_entry
from agentproc.turn import AgentDefinition, TurnInput, TurnOutcome, run_turn

OPEN_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class ScriptedModel:
    def __init__(self, *replies: ModelReply | ModelError) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def queue(self, *replies: ModelReply | ModelError) -> None:
        self.replies.extend(replies)

    async def complete(self, request: ModelRequest, *, on_text: Any = None) -> ModelReply:
        self.requests.append(request)
        if not self.replies:
            return ModelReply(text="done", usage=Usage(1, 1))
        reply = self.replies.pop(0)
        if isinstance(reply, ModelError):
            raise reply
        return reply

    async def aclose(self) -> None:
        return None

    def last_messages(self, index: int = -1) -> list[dict[str, Any]]:
        return [
            {"role": m.role, "content": m.content, "tool_call_id": m.tool_call_id}
            for m in self.requests[index].messages
        ]


def call(name: str, args: Any = None, call_id: str | None = None) -> ToolCall:
    text = args if isinstance(args, str) else json.dumps(args or {})
    return ToolCall(call_id or f"c-{name}-{abs(hash(text)) % 10_000}", name, text)


def reply(
    text: str | None = None,
    *calls: ToolCall,
    usage: tuple[int, int] = (10, 5),
    finish: str | None = None,
) -> ModelReply:
    return ModelReply(text, tuple(calls), Usage(*usage), finish)


def tool(
    name: str,
    handler: Callable[..., Any],
    schema: dict[str, Any] | None = None,
    **options: Any,
) -> ToolEntry:
    return make_entry(name, f"the {name} tool", schema or OPEN_SCHEMA, handler, **options)


def agent(
    model: ScriptedModel,
    *tools: ToolEntry,
    max_steps: int = 32,
    **options: Any,
) -> AgentDefinition:
    options.setdefault("bus", EventBus())
    if "policy" in options and not isinstance(options["policy"], ToolPolicy):
        options["policy"] = ToolPolicy(options["policy"])
    return AgentDefinition(
        name="tester",
        provider=model,
        registry=ToolRegistry(list(tools)),
        system_prompt="be brief",
        params={},
        max_steps=max_steps,
        **options,
    )


class NoRuntime:
    """`ctx.runtime` for tests that never talk to other agents."""

    async def request(self, target: str, input: str, **kw: Any) -> Any:
        raise AssertionError("no other agents here")

    async def send(self, target: str, input: str, **kw: Any) -> None:
        raise AssertionError("no other agents here")

    def catalog(self) -> dict[str, Any]:
        return {
            "swarmName": "default",
            "entryAgent": "tester",
            "selfAgent": "tester",
            "availableAgents": ["helper", "tester"],
            "callableAgents": ["helper"],
        }


def instance(directory: Path, key: str = "k1") -> Instance:
    return Instance(key, directory / key).load()


async def turn(
    definition: AgentDefinition,
    where: Instance | Path,
    text: str = "hello",
    *,
    resume: bool = False,
    parent_span_id: str | None = None,
    trace_id: str = "t" * 32,
    turn_input: TurnInput | None = None,
) -> TurnOutcome:
    inst = where if isinstance(where, Instance) else instance(where)
    return await run_turn(
        definition,
        inst,
        turn_input
        or TurnInput(text, inst.key, trace_id, "cli:test", parent_span_id=parent_span_id),
        NoRuntime(),  # type: ignore[arg-type]
        inst.directory / "work",
        resume=resume,
    )


def events(inst: Instance) -> list[Any]:
    inst.events.flush()  # batched: written a second after the turn, or now
    path = inst.events.path
    if not path.exists():
        return []
    return [event_decoder.decode(line) for line in path.read_bytes().splitlines() if line]


def tool_results(model: ScriptedModel, index: int = -1) -> list[dict[str, Any]]:
    """The tool results the request `index` carried, in order, decoded."""
    return [
        json.loads(m.content or "{}") for m in model.requests[index].messages if m.role == "tool"
    ]
