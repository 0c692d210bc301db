import json

import pytest

from agentproc.messages import Message, ModelRequest, ToolCall
from agentproc.providers.scripted import ScriptedProvider, ScriptError
from goondan.bundle.model import ModelSpec

RULES = {
    "rules": [
        {
            "when": r"(\d+) plus (\d+)",
            "steps": [
                {
                    "call": "calc__add",
                    "args": {"a": "{{match.1 | number}}", "b": "{{match.2 | int}}"},
                },
                {"reply": "sum={{result.sum}} first={{results.0.sum}} in={{input}}"},
            ],
        }
    ],
    "default": "default: {{input}}",
}


def provider(options=RULES) -> ScriptedProvider:
    return ScriptedProvider(ModelSpec(provider="scripted", model="s", options=options))


def user(text: str) -> Message:
    return Message(id="u", role="user", content=text)


async def test_first_step_calls_the_tool_with_typed_arguments():
    reply = await provider().complete(ModelRequest([user("2 plus 40")], []))
    [call] = reply.tool_calls
    assert call.name == "calc__add"
    assert json.loads(call.arguments) == {"a": 2, "b": 40}


async def test_next_step_reads_the_tool_result():
    history = [
        user("2 plus 40"),
        Message(id="a", role="assistant", tool_calls=(ToolCall("c1", "calc__add", "{}"),)),
        Message(
            id="t", role="tool", tool_call_id="c1", content='{"status":"ok","output":{"sum":42}}'
        ),
    ]
    reply = await provider().complete(ModelRequest(history, []))
    assert reply.tool_calls == ()
    assert reply.text == "sum=42 first=42 in=2 plus 40"


async def test_no_matching_rule_uses_the_default_reply():
    reply = await provider().complete(ModelRequest([user("hello")], []))
    assert reply.text == "default: hello"


async def test_without_options_it_echoes():
    reply = await provider({}).complete(ModelRequest([user("ping")], []))
    assert reply.text == "You said: ping"


async def test_only_the_current_turn_counts():
    earlier = [user("1 plus 1"), Message(id="a0", role="assistant", content="done")]
    reply = await provider().complete(ModelRequest([*earlier, user("3 plus 4")], []))
    assert reply.tool_calls[0].name == "calc__add"


def test_bad_options_are_a_clear_error():
    with pytest.raises(ScriptError, match="invalid scripted options"):
        provider({"rules": [{"when": "(", "steps": []}]})


def test_an_unknown_filter_is_an_error_when_the_model_loads_not_mid_turn():
    options = {"default": "{{input | upper}}"}
    with pytest.raises(ScriptError, match="unknown placeholder filter 'upper'"):
        provider(options)
