"""The built-in extensions of @goondan/base, as an agent loads them from a bundle."""

import json
import textwrap
from pathlib import Path
from typing import Any

import structlog

from agentproc.extensions import load_extensions, plan_extensions
from agentproc.instance import Instance
from agentproc.messages import Message, ModelError, ToolCall
from goondan.bundle import load_bundle
from tests.unit.agentproc.loop_kit import ScriptedModel, agent, call, reply, tool, turn

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  extensions:
%s
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/a
  agents: [{ref: Agent/a}]
"""


async def with_extensions(tmp_path: Path, model: ScriptedModel, refs: dict[str, Any], *tools, **kw):
    lines = []
    for name, config in refs.items():
        lines.append(f"- ref: {{kind: Extension, name: {name}, package: '@goondan/base'}}")
        if config:
            lines.append(f"  config: {json.dumps(config)}")
    root = tmp_path / "bundle"
    root.mkdir(exist_ok=True)
    (root / "goondan.yaml").write_text(BUNDLE % textwrap.indent("\n".join(lines), "    "))
    bundle = load_bundle(root)
    definition = agent(model, *tools, **kw)
    resource = bundle.local("Agent", "a")
    assert resource is not None and definition.bus is not None
    await load_extensions(
        plan_extensions(bundle, resource),
        agent_name="a",
        pipeline=definition.pipeline,
        registry=definition.registry,
        bus=definition.bus,
    )
    return definition


def history(tmp_path: Path, messages: list[Message]) -> Instance:
    inst = Instance("k", tmp_path / "k").load()
    for message in messages:
        inst.conversation.append(message)
    inst.conversation.fold()
    return inst


def user(i: int, text: str = "") -> Message:
    return Message(id=f"u{i}", role="user", content=text or f"question {i}")


def answer(i: int, text: str = "") -> Message:
    return Message(id=f"a{i}", role="assistant", content=text or f"answer {i}")


def calls(i: int, *ids: str) -> list[Message]:
    tool_calls = tuple(ToolCall(c, "t__x", "{}") for c in ids)
    return [
        Message(id=f"c{i}", role="assistant", tool_calls=tool_calls),
        *(Message(id=f"r{c}", role="tool", tool_call_id=c, content='{"status":"ok"}') for c in ids),
    ]


def ids(model: ScriptedModel, index: int = 0) -> list[str]:
    return [m.id for m in model.requests[index].messages if m.role != "system"]


# -- message-window ------------------------------------------------------------------------------


async def test_window_removes_the_oldest_without_splitting_tool_calls(tmp_path):
    inst = history(tmp_path, [user(1), *calls(1, "x1", "x2"), answer(1), user(2), answer(2)])
    model = ScriptedModel(reply("ok"))
    definition = await with_extensions(tmp_path, model, {"message-window": {"maxMessages": 4}})
    await turn(definition, inst, "question 3")
    # 7 + 1 messages, window 4: u1, c1, rx1, rx2 go (the cut fell inside the tool group)
    assert ids(model)[:3] == ["a1", "u2", "a2"]
    assert model.requests[0].messages[-1].content == "question 3"


async def test_window_drops_orphaned_results_even_under_the_limit(tmp_path):
    orphan = Message(id="lost", role="tool", tool_call_id="gone", content="{}")
    inst = history(tmp_path, [user(1), orphan, answer(1)])
    model = ScriptedModel(reply("ok"))
    definition = await with_extensions(tmp_path, model, {"message-window": {}})
    await turn(definition, inst)
    assert "lost" not in ids(model)
    assert [m.id for m in inst.conversation.messages][:2] == ["u1", "a1"]


# -- message-compaction -------------------------------------------------------------------------


async def test_compaction_removes_old_messages_keeps_pinned_and_summarizes(tmp_path):
    pinned = Message(id="pin", role="user", content="remember: blue", metadata={"pinned": True})
    old = [user(1), answer(1), pinned, *calls(2, "y1"), answer(2), user(3), answer(3)]
    inst = history(tmp_path, old)
    model = ScriptedModel(reply("ok"))
    config = {"maxMessages": 5, "retainLastMessages": 3}
    definition = await with_extensions(tmp_path, model, {"message-compaction": config})
    await turn(definition, inst, "question 4")
    kept = ids(model)
    assert kept == ["pin", "u3", "a3", kept[-1]]
    assert not {"u1", "a1", "c2", "ry1", "a2"} & set(kept)
    summary = model.requests[0].messages[1]  # after the system prompt, where history was
    assert summary.role == "system" and (summary.content or "").startswith("[message-compaction]")
    assert summary.metadata["compaction.removedCount"] == 5


async def test_compaction_cuts_long_texts_when_removal_is_not_enough(tmp_path):
    inst = history(tmp_path, [user(1, "x" * 5000), answer(1, "y" * 5000)])
    model = ScriptedModel(reply("ok"))
    config = {"maxCharacters": 3000, "retainLastMessages": 2, "maxMessages": 100}
    definition = await with_extensions(tmp_path, model, {"message-compaction": config})
    await turn(definition, inst, "short question")
    sent = [m for m in model.requests[0].messages if m.role != "system"]
    assert sum(len(m.content or "") for m in sent) <= 3000
    assert (sent[0].content or "").endswith("[truncated by message-compaction]")
    assert sent[-1].content == "short question"  # the current input is never cut


async def test_compaction_truncate_mode(tmp_path):
    inst = history(tmp_path, [user(i) for i in range(10)])
    model = ScriptedModel(reply("ok"))
    config = {"maxMessages": 4, "retainLastMessages": 2, "mode": "truncate"}
    definition = await with_extensions(tmp_path, model, {"message-compaction": config})
    await turn(definition, inst, "now")
    assert [m.role for m in model.requests[0].messages] == ["system", "system", "user", "user"]
    assert ids(model)[0] == "u9"


async def test_compaction_summarize_is_triggered_by_the_reported_input_tokens(tmp_path):
    inst = history(tmp_path, [user(1), *calls(1, "x1", "x2"), answer(1), user(2), answer(2)])
    # The first turn's step reports 5000 input tokens: over maxTokens for the next turn, though
    # the conversation's characters alone would not be.
    model = ScriptedModel(
        reply("first", usage=(5000, 10)),
        reply("The user asked two questions; x was called twice."),
        reply("second"),
    )
    config = {"mode": "summarize", "maxTokens": 1000, "retainLastMessages": 2}
    definition = await with_extensions(tmp_path, model, {"message-compaction": config})
    await turn(definition, inst, "question 3")
    assert len(model.requests) == 1  # nothing summarised yet: no count over the budget
    before = len(model.requests[0].messages)
    await turn(definition, inst, "question 4")
    summary_call, answered = model.requests[1:]
    assert summary_call.tools == []
    assert "question 1" in (summary_call.messages[-1].content or "")
    sent = [m for m in answered.messages if m.role != "system"]
    assert (sent[0].content or "").startswith("[message-compaction] Summary")
    assert "x was called twice" in (sent[0].content or "")
    assert sent[0].metadata["compaction.removedCount"] == 8
    # The last two messages stay (the turn's input is one); no tool result without its call.
    assert [m.content for m in sent[1:]] == ["first", "question 4"]
    assert len(answered.messages) < before + 2
    assert not [m for m in sent if m.role == "tool"]


async def test_compaction_summarize_estimates_without_usage(tmp_path):
    inst = history(tmp_path, [user(1, "x" * 4000), answer(1, "y" * 4000), user(2), answer(2)])
    model = ScriptedModel(reply("a summary"), reply("ok"))
    config = {"mode": "summarize", "maxTokens": 1000, "retainLastMessages": 2}
    definition = await with_extensions(tmp_path, model, {"message-compaction": config})
    await turn(definition, inst, "question 3")  # about 2000 tokens by characters / 4
    assert ids(model, 1)[1:] == ["a2", ids(model, 1)[-1]]
    assert "a summary" in (model.requests[1].messages[1].content or "")


async def test_compaction_summarize_under_budget_or_failing_leaves_the_conversation(tmp_path):
    old = [user(1, "x" * 4000), answer(1), user(2), answer(2)]
    inst = history(tmp_path, old)
    model = ScriptedModel(reply("ok"))
    config = {"mode": "summarize", "maxTokens": 5000}
    definition = await with_extensions(tmp_path, model, {"message-compaction": config})
    await turn(definition, inst, "question 3")
    assert ids(model)[:4] == ["u1", "a1", "u2", "a2"]

    inst = history(tmp_path / "failing", old)
    model = ScriptedModel(ModelError("down", code="E_MODEL_UNAVAILABLE"), reply("still ok"))
    config = {"mode": "summarize", "maxTokens": 100, "retainLastMessages": 1}
    definition = await with_extensions(tmp_path, model, {"message-compaction": config})
    outcome = await turn(definition, inst, "question 3")
    assert outcome.text == "still ok"
    assert ids(model, 1)[:4] == ["u1", "a1", "u2", "a2"]


# -- tool-search -----------------------------------------------------------------------------------


async def test_tool_search_narrows_the_next_steps(tmp_path):
    model = ScriptedModel(
        reply(None, call("tool-search__search", {"query": "weather"}, "s1")),
        reply(None, call("weather__now", {}, "w1")),
        reply("sunny"),
    )
    tools = [
        tool("weather__now", lambda c, a: "sun"),
        tool("mail__send", lambda c, a: "sent"),
        tool("files__read", lambda c, a: "text"),
    ]
    definition = await with_extensions(tmp_path, model, {"tool-search": {}}, *tools)
    inst = Instance("k", tmp_path / "k").load()
    await turn(definition, inst)
    offered = [[t.name for t in r.tools] for r in model.requests]
    assert offered[0] == ["weather__now", "mail__send", "files__read", "tool-search__search"]
    assert offered[1] == ["weather__now", "tool-search__search"]
    # the selection persists into the next turn; "*" clears it
    model.queue(reply(None, call("tool-search__search", {"query": "*"}, "s2")), reply("all"))
    await turn(definition, inst, "again")
    assert [t.name for t in model.requests[3].tools] == ["weather__now", "tool-search__search"]
    assert len(model.requests[4].tools) == 4


async def test_tool_search_selection_can_last_one_turn(tmp_path):
    model = ScriptedModel(
        reply(None, call("tool-search__search", {"query": "mail"}, "s1")), reply("ok"), reply("ok")
    )
    tools = [tool("weather__now", lambda c, a: 1), tool("mail__send", lambda c, a: 2)]
    config = {"persistSelection": False}
    definition = await with_extensions(tmp_path, model, {"tool-search": config}, *tools)
    inst = Instance("k", tmp_path / "k").load()
    await turn(definition, inst)
    assert len(model.requests[1].tools) == 2
    await turn(definition, inst, "next")
    assert len(model.requests[2].tools) == 3


# -- required-tools-guard --------------------------------------------------------------------------


async def test_guard_keeps_the_turn_going_until_each_required_tool_succeeded(tmp_path):
    model = ScriptedModel(
        reply("I am done"),
        reply(None, call("audit__log", {}, "c1")),
        reply("done now"),
        reply(None, call("notify__send", {}, "c2")),
        reply("really done"),
    )
    config = {"requiredTools": ["audit__log", "notify__send"], "mode": "all"}
    tools = [tool("audit__log", lambda c, a: 1), tool("notify__send", lambda c, a: 2)]
    definition = await with_extensions(tmp_path, model, {"required-tools-guard": config}, *tools)
    outcome = await turn(definition, tmp_path / "i")
    assert (outcome.text, outcome.steps) == ("really done", 5)
    reminder = model.requests[1].messages[-1]
    assert (reminder.content or "").endswith("audit__log, notify__send.")
    assert (model.requests[3].messages[-1].content or "").endswith(": notify__send.")


async def test_guard_any_mode_is_bounded_by_max_steps(tmp_path):
    model = ScriptedModel(*[reply(f"no {i}") for i in range(10)])
    config = {"requiredTools": ["audit__log"], "errorMessage": "call audit__log!"}
    definition = await with_extensions(
        tmp_path,
        model,
        {"required-tools-guard": config},
        tool("audit__log", lambda c, a: 1),
        max_steps=3,
    )
    outcome = await turn(definition, tmp_path / "i")
    assert outcome.finish_reason == "max_steps" and len(model.requests) == 3
    assert model.requests[1].messages[-1].content == "call audit__log!"


# -- inter-agent-response-format -----------------------------------------------------------------


async def test_async_responses_become_readable_text(tmp_path):
    body = {
        "type": "inter_agent_response",
        "requestId": "7",
        "fromAgentId": "researcher",
        "status": "ok",
        "response": "42 is the answer",
    }
    failed = {
        **body,
        "requestId": "8",
        "status": "timeout",
        "error": {"code": "AGENT_REQUEST_TIMEOUT", "message": "too slow"},
    }
    inst = Instance("k", tmp_path / "k").load()
    for info in (body, failed):
        inst.deliver(
            Message(
                id=f"r{info['requestId']}",
                role="user",
                content=json.dumps(info),
                metadata={"__goondanInterAgentResponse": info},
            )
        )
    model = ScriptedModel(reply("ok"))
    definition = await with_extensions(tmp_path, model, {"inter-agent-response-format": {}})
    await turn(definition, inst)
    texts = [m.content for m in model.requests[0].messages if m.id in ("r7", "r8")]
    assert texts == [
        "[inter-agent response] from researcher -> tester status=ok requestId=7\n42 is the answer",
        "[inter-agent response] from researcher -> tester status=timeout requestId=8\n"
        "error(AGENT_REQUEST_TIMEOUT): too slow",
    ]


# -- logging ---------------------------------------------------------------------------------------


async def test_logging_writes_turn_step_and_tool_lines(tmp_path):
    model = ScriptedModel(reply(None, call("t__a", {"secret": 1})), reply("ok"))
    definition = await with_extensions(
        tmp_path, model, {"logging": {"level": "info"}}, tool("t__a", lambda c, a: 1)
    )
    with structlog.testing.capture_logs() as logs:
        await turn(definition, tmp_path / "i")
    lines = [entry["event"] for entry in logs if entry["event"].startswith("[logging")]
    assert lines == [
        "[logging.turn] start",
        "[logging.step] start",
        "[logging.toolCall] start",
        "[logging.toolCall] complete",
        "[logging.step] complete",
        "[logging.step] start",
        "[logging.step] complete",
        "[logging.turn] complete",
    ]
    assert not any("args" in entry for entry in logs)  # includeToolArgs is off


# -- context-message -----------------------------------------------------------------------------


def turn_events(definition: Any) -> list[list[dict[str, Any]]]:
    """`extension.events` of each turn, as the first step of the turn sees them."""
    seen: list[list[dict[str, Any]]] = []

    async def record(ctx: Any) -> Any:
        if ctx.step_index == 0:
            seen.append(list(ctx.turn_metadata.get("extension.events", [])))
        return await ctx.next()

    definition.pipeline.register("step", record)
    return seen


async def test_context_message_adds_the_catalog_once_and_never_repeats_the_prompt(tmp_path):
    model = ScriptedModel(reply("one"), reply("two"))
    config = {"includeAgentPrompt": True, "includeSwarmCatalog": True}
    definition = await with_extensions(tmp_path, model, {"context-message": config})
    seen = turn_events(definition)
    inst = history(tmp_path, [])
    await turn(definition, inst, "first")
    await turn(definition, inst, "second")

    for request in model.requests:
        systems = [m for m in request.messages if m.role == "system"]
        assert [m.content for m in systems].count("be brief") == 1  # the runtime's, only
        [context] = [m for m in systems if m.content != "be brief"]
        text = context.content or ""
        assert text.startswith("[runtime_catalog]\nswarm=default\n")
        assert "callableAgents=helper\n[/runtime_catalog]\nWhen the agent" in text
        marker = context.metadata["__goondanContextMessage"]
        assert marker["segmentIds"] == ["runtime.swarm.catalog"]
    stored = [m for m in inst.conversation.messages if m.role == "system"]
    assert len(stored) == 1  # the second turn found it by its hash
    first, second = seen
    assert {"id": "agent.prompt.system", "included": False, "reason": "sent by the runtime"} in [
        e.get("data") for e in first
    ]
    assert first[-1]["name"] == "context.message.appended" and first[-1]["actor"] == (
        "context-message"
    )
    assert second[-1]["name"] == "context.message.duplicate"
    assert second[-1]["data"]["promptHash"] == marker["promptHash"]


async def test_context_message_with_nothing_to_add_is_a_no_op(tmp_path):
    model = ScriptedModel(reply("ok"))
    definition = await with_extensions(tmp_path, model, {"context-message": {}})
    seen = turn_events(definition)
    inst = history(tmp_path, [])
    await turn(definition, inst)
    assert [m.content for m in model.requests[0].messages if m.role == "system"] == ["be brief"]
    assert seen[0][-1]["name"] == "context.message.empty"


async def test_context_message_route_prefers_the_caller_over_the_inbound(tmp_path):
    from agentproc.turn import TurnInput

    model = ScriptedModel(reply("ok"))
    config = {
        "includeAgentPrompt": False,
        "includeInboundContext": True,
        "includeCallContext": True,
        "includeRouteSummary": True,
    }
    definition = await with_extensions(tmp_path, model, {"context-message": config})
    inst = history(tmp_path, [])
    metadata = {
        "eventId": "agent_event_9",
        "event": "review.requested",
        "eventMetadata": {"pr": 12},
        "callerInstanceKey": "boss-1",
    }
    request = TurnInput(
        "review",
        inst.key,
        "t" * 32,
        "agent:boss",
        "r-3",
        metadata=metadata,
        call_chain=("boss",),
    )
    await turn(definition, inst, turn_input=request)
    [context] = [m for m in model.requests[0].messages if m.role == "system" and m.id != "system"]
    text = context.content or ""
    inbound, call_, route = text.split("\n\n")
    assert inbound.startswith(
        "[runtime_inbound]\neventId=agent_event_9\neventType=review.requested"
    )
    assert 'eventMetadata={"pr": 12}' in inbound
    assert call_.splitlines()[1:] == [
        "callerAgent=boss",
        "callerInstanceKey=boss-1",
        "callSource=request",
        "callStack=boss",
        "replyTo.target=boss",
        "replyTo.correlationId=r-3",
        "[/runtime_call]",
    ]
    assert route.splitlines()[1:5] == [
        "precedence=call>inbound",
        "senderKind=agent",
        "senderName=boss",
        "eventType=review.requested",
    ]
    assert "senderInstanceKey=boss-1" in route
