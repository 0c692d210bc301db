"""`provider: scripted` — a deterministic offline model for the quickstart, demos and tests.

It follows rules from `Model.spec.options`:

    options:
      rules:
        - when: "(\\d+) plus (\\d+)"        # regex searched in the turn's user input
          steps:                             # one entry per LLM step of the turn
            - call: calc__add                # a tool call (use `calls: [...]` for several)
              args: {a: "{{match.1 | number}}", b: "{{match.2 | number}}"}
            - reply: "The sum is {{result.sum}}."   # final text: the turn ends
      default: "You said: {{input}}"          # when no rule matches (this is the default)

The first rule whose `when` matches is used. At each step the model counts its own earlier
assistant messages in this turn and plays the next entry of `steps`; past the end it replies
with the last tool result. Placeholders `{{path | filter}}` read from:
`input` (the user text), `match.N` / `match.NAME` (regex groups), `result` (the last tool
result's `output`, or its `error` when it failed) and `results.N` (every result of the turn,
in order). Filters: `number`, `int`, `json`.
A value that is exactly one placeholder keeps the value's type.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from agentproc.messages import Message, ModelReply, ModelRequest, ToolCall, Usage
from agentproc.providers._common import ChunkCallback, TextCallback
from goondan.bundle.model import ModelSpec

_PLACEHOLDER = re.compile(r"\{\{\s*([^}|]+?)\s*(?:\|\s*(\w+)\s*)?\}\}")
_WHOLE = re.compile(r"^\{\{[^}]*\}\}$")


class ScriptError(ValueError):
    pass


class _Call(msgspec.Struct, frozen=True):
    call: str
    args: dict[str, Any] = {}


class _Step(msgspec.Struct, frozen=True):
    reply: str | None = None
    call: str | None = None
    args: dict[str, Any] = {}
    calls: tuple[_Call, ...] = ()


class _Rule(msgspec.Struct, frozen=True):
    when: str
    steps: tuple[_Step, ...]


class _Script(msgspec.Struct, frozen=True):
    rules: tuple[_Rule, ...] = ()
    default: str = "You said: {{input}}"


class ScriptedProvider:
    def __init__(self, spec: ModelSpec) -> None:
        try:
            script = msgspec.convert(spec.options, _Script)
            self._rules = [(re.compile(rule.when), rule) for rule in script.rules]
        except (msgspec.ValidationError, re.error) as exc:
            raise ScriptError(f"Model '{spec.model}': invalid scripted options: {exc}") from None
        self._default = script.default
        self.label = f"scripted model '{spec.model}'"
        self.streaming = False

    async def aclose(self) -> None:
        return None

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextCallback | None = None,
        on_chunk: ChunkCallback | None = None,
    ) -> ModelReply:
        # Replies are whole at once: `on_text` (streaming text) is never called.
        turn = _current_turn(request.messages)
        user_text = (turn[0].content or "") if turn else ""
        results = _results(turn)
        scope: dict[str, Any] = {
            "input": user_text,
            "result": results[-1] if results else None,
            "results": results,
        }
        for pattern, rule in self._rules:
            found = pattern.search(user_text)
            if found is None:
                continue
            scope["match"] = {str(i): g for i, g in enumerate([found[0], *found.groups()])}
            scope["match"].update(found.groupdict())
            position = sum(1 for m in turn if m.role == "assistant")
            if position < len(rule.steps):
                return self._play(rule.steps[position], scope, len(request.messages))
            return _reply(_render_text("{{result}}", scope))
        return _reply(_render_text(self._default, scope))

    def _play(self, step: _Step, scope: dict[str, Any], seq: int) -> ModelReply:
        calls = list(step.calls)
        if step.call:
            calls.insert(0, _Call(step.call, step.args))
        if not calls:
            return _reply(_render_text(step.reply or "", scope))
        tool_calls = tuple(
            ToolCall(
                id=f"call_{seq}_{i}",
                name=c.call,
                arguments=json.dumps(_render_value(c.args, scope)),
            )
            for i, c in enumerate(calls)
        )
        text = _render_text(step.reply, scope) if step.reply else None
        return ModelReply(text=text, tool_calls=tool_calls, finish_reason="tool_calls")


def _reply(text: str) -> ModelReply:
    return ModelReply(text=text, usage=Usage(output_tokens=len(text) // 4), finish_reason="stop")


def _current_turn(messages: list[Message]) -> list[Message]:
    """Messages from the last user input on (tool results are `tool` messages, not input)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return messages[index:]
    return []


def _results(turn: list[Message]) -> list[Any]:
    """Each tool result of this turn: its `output`, or its `error` when it failed."""
    results: list[Any] = []
    for message in turn:
        if message.role != "tool" or not message.content:
            continue
        try:
            data = json.loads(message.content)
        except ValueError:
            results.append(message.content)
            continue
        if isinstance(data, dict) and "status" in data:
            data = data.get("output") if data["status"] == "ok" else data.get("error")
        results.append(data)
    return results


def _lookup(scope: dict[str, Any], path: str) -> Any:
    value: Any = scope
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _apply(value: Any, filter_name: str | None) -> Any:
    if filter_name is None:
        return value
    try:
        if filter_name == "number":
            number = float(value)
            return int(number) if number.is_integer() else number
        if filter_name == "int":
            return int(float(value))
        if filter_name == "json":
            return json.loads(value) if isinstance(value, str) else value
    except (TypeError, ValueError):
        return value
    raise ScriptError(f"unknown placeholder filter '{filter_name}' (use number, int or json)")


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _render_text(template: str, scope: dict[str, Any]) -> str:
    return _PLACEHOLDER.sub(lambda m: _as_text(_apply(_lookup(scope, m[1]), m[2])), template)


def _render_value(value: Any, scope: dict[str, Any]) -> Any:
    if isinstance(value, str):
        if _WHOLE.match(value):
            found = _PLACEHOLDER.match(value)
            if found:
                return _apply(_lookup(scope, found[1]), found[2])
        return _render_text(value, scope)
    if isinstance(value, dict):
        return {k: _render_value(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [_render_value(v, scope) for v in value]
    return value
