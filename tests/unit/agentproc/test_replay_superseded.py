"""A redelivered request whose turn was cut short, while other requests' turns followed it in
the same conversation, runs again from its input instead of "resuming" after their messages."""

from pathlib import Path

from agentproc.conversation import INTERRUPTED, Conversation, read_messages
from agentproc.messages import Message, ToolCall
from goondan.paths import StatePaths
from tests.unit.agentproc.agent_kit import AGENT, SWARM, running_agent


def stored(tmp_path: Path, key: str) -> Path:
    return StatePaths.at(tmp_path / "state").conversation_dir(SWARM, key, AGENT)


async def test_a_superseded_turn_runs_again_from_its_input(tmp_path: Path) -> None:
    directory = stored(tmp_path, "k")
    convo = Conversation(directory)
    convo.load()
    call = ToolCall("call_1", "t__slow", "{}")
    for message in (  # request rA cut short by a crash; rB ran after it
        Message(id="1", role="user", content="first", metadata={"requestId": "rA"}),
        Message(id="2", role="assistant", tool_calls=(call,)),
        Message(id="3", role="tool", content=INTERRUPTED, tool_call_id="call_1"),
        Message(id="4", role="user", content="second", metadata={"requestId": "rB"}),
        Message(id="5", role="assistant", content="echo second"),
    ):
        convo.append(message)
    convo.close()
    async with running_agent(tmp_path, reply="echo {{input}}") as orchestrator:
        answer = await orchestrator.ask("k", "first", request_id="rA")
        assert (answer.status, answer.response) == ("ok", "echo first")
        again = await orchestrator.ask("k", "first", request_id="rA")  # answered: resent
        assert again.response == "echo first"
    messages = read_messages(directory)
    assert [(m.role, m.content) for m in messages[-2:]] == [
        ("user", "first"),
        ("assistant", "echo first"),
    ]
    assert messages[-2].metadata["requestId"] == "rA"
    assert len(messages) == 7  # nothing else was written: the reply was not run twice


async def test_the_last_turn_still_resumes_where_it_stopped(tmp_path: Path) -> None:
    directory = stored(tmp_path, "k")
    convo = Conversation(directory)
    convo.load()
    call = ToolCall("call_1", "t__slow", "{}")
    for message in (
        Message(id="1", role="user", content="first", metadata={"requestId": "rA"}),
        Message(id="2", role="assistant", tool_calls=(call,)),
        Message(id="3", role="tool", content=INTERRUPTED, tool_call_id="call_1"),
    ):
        convo.append(message)
    convo.close()
    async with running_agent(tmp_path, reply="echo {{input}}") as orchestrator:
        answer = await orchestrator.ask("k", "first", request_id="rA")
        assert answer.response == "echo first"
    messages = read_messages(directory)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
