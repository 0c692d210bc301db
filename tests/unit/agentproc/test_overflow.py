"""A context overflow: the conversation compacted once (oldest half summarised) and retried."""

import json
from typing import Any

from agentproc.compaction import SUMMARY_PREFIX, oldest_part
from agentproc.messages import Message, ModelError, ToolCall
from tests.unit.agentproc.loop_kit import ScriptedModel, agent, events, instance, reply, turn


def overflow() -> ModelError:
    return ModelError("maximum context length is 100 tokens", code="E_CONTEXT_OVERFLOW")


def filled(tmp_path, rounds: int = 4):
    """A conversation of user questions, tool calls with their results, and answers."""
    inst = instance(tmp_path)
    for i in range(rounds):
        inst.conversation.append(Message(id=f"u{i}", role="user", content=f"question {i} " * 50))
        call = ToolCall(f"call{i}", "t__look", json.dumps({"i": i}))
        inst.conversation.append(Message(id=f"c{i}", role="assistant", tool_calls=(call,)))
        inst.conversation.append(
            Message(id=f"r{i}", role="tool", tool_call_id=f"call{i}", content="x" * 300)
        )
        inst.conversation.append(Message(id=f"a{i}", role="assistant", content=f"answer {i}"))
    inst.conversation.fold()
    return inst


def pairs_intact(messages) -> bool:
    calls = {c.id for m in messages for c in m.tool_calls}
    results = {m.tool_call_id for m in messages if m.role == "tool"}
    return calls == results


async def test_an_overflowing_step_is_compacted_and_retried(tmp_path):
    inst = filled(tmp_path)
    model = ScriptedModel(overflow(), reply("the user asked 4 questions"), reply("all fine"))
    outcome = await turn(agent(model), inst, "and now?")
    assert (outcome.finish_reason, outcome.text) == ("text_response", "all fine")
    first, summary_call, retry = model.requests
    # The summariser saw the oldest messages as a transcript, with no tools offered.
    assert summary_call.tools == [] and "question 0" in (summary_call.messages[1].content or "")
    assert len(retry.messages) < len(first.messages)
    sent = [m for m in retry.messages if m.role != "system"]
    assert sent[0].role == "user" and (sent[0].content or "").startswith(SUMMARY_PREFIX)
    assert "the user asked 4 questions" in (sent[0].content or "")
    assert sent[-1].content == "and now?"
    assert pairs_intact(sent)
    # The conversation itself was compacted, for the next turns too.
    kept = inst.conversation.messages
    assert kept[0].metadata["compaction.summary"] is True and pairs_intact(kept)
    assert "turn.compacted" in [e.type for e in events(inst)]
    # The summary's tokens count for the turn.
    assert outcome.usage.input_tokens == 20


async def test_still_overflowing_after_compaction_ends_with_context_overflow(tmp_path):
    inst = filled(tmp_path)
    model = ScriptedModel(overflow(), reply("a summary"), overflow())
    outcome = await turn(agent(model), inst, "and now?")
    assert (outcome.finish_reason, outcome.error_code) == ("error", "E_CONTEXT_OVERFLOW")
    assert "after compacting" in outcome.text
    assert len(model.requests) == 3  # compacted once, not again and again


async def test_nothing_to_compact_is_an_overflow_at_once(tmp_path):
    model = ScriptedModel(overflow())
    outcome = await turn(agent(model), tmp_path, "x" * 1000)
    assert (outcome.finish_reason, outcome.error_code) == ("error", "E_CONTEXT_OVERFLOW")
    assert len(model.requests) == 1


async def test_a_failed_summary_leaves_the_overflow(tmp_path):
    inst = filled(tmp_path)
    before = len(inst.conversation.messages)
    model = ScriptedModel(overflow(), ModelError("down", code="E_MODEL_UNAVAILABLE"))
    outcome = await turn(agent(model), inst, "and now?")
    assert outcome.error_code == "E_CONTEXT_OVERFLOW"
    # Nothing was removed: the question and the failure message joined the conversation.
    assert len(inst.conversation.messages) == before + 2


def m(i: int, role: Any, size: int = 100, **kw: Any) -> Message:
    return Message(id=str(i), role=role, content="x" * size, **kw)


def test_the_cut_never_parts_a_call_from_its_results():
    call = ToolCall("k", "t__x", "{}")
    messages = [
        m(0, "user", 10),
        Message(id="1", role="assistant", tool_calls=(call, ToolCall("k2", "t__x", "{}"))),
        m(2, "tool", 500, tool_call_id="k"),
        m(3, "tool", 500, tool_call_id="k2"),
        m(4, "assistant"),
        m(5, "user"),
    ]
    # Half the characters falls after the first result: the cut moves past the second.
    assert [x.id for x in oldest_part(messages)] == ["0", "1", "2", "3"]
    # Results running to the end: the cut moves back before their call.
    ending = messages[:4]
    assert [x.id for x in oldest_part(ending)] == ["0"]
    assert oldest_part(messages[:1]) == []
