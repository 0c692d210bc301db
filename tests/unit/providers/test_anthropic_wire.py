"""The neutral conversation -> Messages API translation, without HTTP."""

from __future__ import annotations

from agentproc.messages import Message, ToolCall
from agentproc.providers.anthropic import wire_messages, wire_tool_id


def test_system_messages_are_lifted_and_joined() -> None:
    system, messages = wire_messages(
        [
            Message(id="s1", role="system", content="Be terse."),
            Message(id="u", role="user", content="hi"),
            Message(id="s2", role="system", content="Answer in English."),
            Message(id="s3", role="system", content="  "),
        ]
    )

    assert system == "Be terse.\n\nAnswer in English."
    assert messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_no_system_prompt_is_none() -> None:
    assert wire_messages([Message(id="u", role="user", content="hi")])[0] is None


def test_empty_messages_are_skipped_and_neighbours_merged() -> None:
    _, messages = wire_messages(
        [
            Message(id="u1", role="user", content="one"),
            Message(id="a", role="assistant", content=""),  # e.g. an empty reply
            Message(id="u2", role="user", content="two"),
        ]
    )

    assert messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        }
    ]


def test_tool_results_lead_the_user_message_they_share() -> None:
    _, messages = wire_messages(
        [
            Message(id="u", role="user", content="go"),
            Message(
                id="a",
                role="assistant",
                tool_calls=(ToolCall("t1", "x", "{}"), ToolCall("t2", "y", "[1, 2]")),
            ),
            Message(id="steer", role="user", content="also this"),  # queued mid-step
            Message(id="r1", role="tool", content="", tool_call_id="t1"),
            Message(id="r2", role="tool", content="done", tool_call_id="t2"),
        ]
    )

    assert messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "t1", "name": "x", "input": {}},
            {"type": "tool_use", "id": "t2", "name": "y", "input": {}},  # not an object
        ],
    }
    assert messages[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "done"},
            {"type": "text", "text": "also this"},
        ],
    }


def test_tool_ids_keep_valid_characters_only() -> None:
    assert wire_tool_id("toolu_01AbC-x") == "toolu_01AbC-x"
    assert wire_tool_id("call_abc123") == "call_abc123"
    assert wire_tool_id("fc:1/2.3") == "fc_1_2_3"
    assert wire_tool_id("") == "toolu_empty"
