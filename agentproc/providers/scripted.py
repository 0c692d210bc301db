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
in order). Filters: `number`, `int`, `json` (another name is an error when the agent starts).
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
            self._rules = [
                (re.compile(rule.when), tuple(_PlayStep(step) for step in rule.steps))
                for rule in script.rules
            ]
            self._default = _Template(script.default)
        except (msgspec.ValidationError, re.error, ScriptError) as exc:
            raise ScriptError(f"Model '{spec.model}': invalid scripted options: {exc}") from None
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
        scope = _Scope(_current_turn(request.messages))
        for pattern, steps in self._rules:
            found = pattern.search(scope.input)
            if found is None:
                continue
            scope.match = {str(i): g for i, g in enumerate([found[0], *found.groups()])}
            scope.match.update(found.groupdict())
            position = sum(1 for m in scope.turn if m.role == "assistant")
            if position < len(steps):
                return steps[position].play(scope, len(request.messages))
            return _reply(_LAST_RESULT.text(scope))
        return _reply(self._default.text(scope))


def _reply(text: str) -> ModelReply:
    return ModelReply(text=text, usage=Usage(output_tokens=len(text) // 4), finish_reason="stop")


def _current_turn(messages: list[Message]) -> list[Message]:
    """Messages from the last user input on (tool results are `tool` messages, not input)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return messages[index:]
    return []


class _Scope:
    """What placeholders read; tool results are parsed only when a template asks for them."""

    def __init__(self, turn: list[Message]) -> None:
        self.turn = turn
        self.input = (turn[0].content or "") if turn else ""
        self.match: dict[str, Any] | None = None
        self._results: list[Any] | None = None

    def get(self, name: str) -> Any:
        if name == "input":
            return self.input
        if name == "match":
            return self.match
        if name == "result" or name == "results":
            if self._results is None:
                self._results = _results(self.turn)
            if name == "results":
                return self._results
            return self._results[-1] if self._results else None
        return None


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


_FILTERS = ("number", "int", "json")


class _Slot:
    """One `{{path | filter}}`."""

    __slots__ = ("path", "filter")

    def __init__(self, path: str, filter_name: str | None) -> None:
        if filter_name is not None and filter_name not in _FILTERS:
            raise ScriptError(
                f"unknown placeholder filter '{filter_name}' (use number, int or json)"
            )
        self.path = path.split(".")
        self.filter = filter_name

    def value(self, scope: _Scope) -> Any:
        value: Any = scope.get(self.path[0])
        for part in self.path[1:]:
            if isinstance(value, dict):
                value = value.get(part)
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return None
        return value if self.filter is None else _apply(value, self.filter)


class _Template:
    """A text with placeholders, split once (at load) into literal text and `_Slot`s."""

    __slots__ = ("parts", "whole")

    def __init__(self, template: str) -> None:
        parts: list[str | _Slot] = []
        end = 0
        for found in _PLACEHOLDER.finditer(template):
            if found.start() > end:
                parts.append(template[end : found.start()])
            parts.append(_Slot(found[1], found[2]))
            end = found.end()
        if end < len(template):
            parts.append(template[end:])
        self.parts = tuple(parts)
        # A value that is exactly one placeholder keeps the value's type (in tool arguments).
        only = parts[0] if len(parts) == 1 else None
        self.whole = only if isinstance(only, _Slot) and _WHOLE.match(template) else None

    def text(self, scope: _Scope) -> str:
        return "".join(p if isinstance(p, str) else _as_text(p.value(scope)) for p in self.parts)

    def value(self, scope: _Scope) -> Any:
        return self.whole.value(scope) if self.whole is not None else self.text(scope)


_LAST_RESULT = _Template("{{result}}")


class _PlayStep:
    """One entry of a rule's `steps`, its templates compiled."""

    __slots__ = ("reply", "calls")

    def __init__(self, step: _Step) -> None:
        calls = list(step.calls)
        if step.call:
            calls.insert(0, _Call(step.call, step.args))
        self.calls = tuple((c.call, _compile_value(c.args)) for c in calls)
        self.reply = _Template(step.reply) if step.reply is not None else None

    def play(self, scope: _Scope, seq: int) -> ModelReply:
        if not self.calls:
            return _reply(self.reply.text(scope) if self.reply is not None else "")
        tool_calls = tuple(
            ToolCall(
                id=f"call_{seq}_{i}",
                name=name,
                arguments=json.dumps(_render_value(args, scope)),
            )
            for i, (name, args) in enumerate(self.calls)
        )
        text = self.reply.text(scope) if self.reply is not None and self.reply.parts else None
        return ModelReply(text=text, tool_calls=tool_calls, finish_reason="tool_calls")


def _apply(value: Any, filter_name: str) -> Any:
    try:
        if filter_name == "number":
            number = float(value)
            return int(number) if number.is_integer() else number
        if filter_name == "int":
            return int(float(value))
        return json.loads(value) if isinstance(value, str) else value  # json
    except (TypeError, ValueError):
        return value


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _compile_value(value: Any) -> Any:
    if isinstance(value, str):
        return _Template(value)
    if isinstance(value, dict):
        return {k: _compile_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compile_value(v) for v in value]
    return value


def _render_value(value: Any, scope: _Scope) -> Any:
    if isinstance(value, _Template):
        return value.value(scope)
    if isinstance(value, dict):
        return {k: _render_value(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [_render_value(v, scope) for v in value]
    return value
