"""Where an agent keeps an instance's conversation: one file beside the instance's directory
(`instances/<key>/<agent>+events.jsonl`), the directory made only for other state; and a
conversation stored by an earlier version inside the directory is continued where it is."""

from __future__ import annotations

from pathlib import Path

from agentproc.conversation import read_messages
from goondan.paths import StatePaths
from ipc import wire
from tests.unit.agentproc.agent_kit import (
    AGENT,
    OTHERS_EVENTS,
    SWARM,
    Orchestrator,
    key_another_agent_uses,
    running_agent,
)

OLDER_EVENTS = (
    b'{"op":"append","message":{"id":"1","role":"user","content":"before"}}\n'
    b'{"op":"append","message":{"id":"2","role":"assistant","content":"You said: before"}}\n'
)


async def drop(orchestrator: Orchestrator, key: str) -> wire.Dropped:
    command = wire.control("instance.drop", wire.InstanceDropArgs(key))
    frame = wire.encode(wire.CONTROL, wire.ORCHESTRATOR, AGENT, command, correlation_id="d1")
    orchestrator.router.send_multipart([AGENT.encode(), frame])
    env = await orchestrator.take(wire.CONTROL_REPLY)
    reply = wire.decode_payload(env, wire.ControlReply)
    assert reply.ok, reply.error
    return wire.decode_result(reply, wire.Dropped)


async def test_a_new_conversation_is_one_file_and_no_directory(tmp_path: Path) -> None:
    paths = StatePaths.at(tmp_path / "state")
    key_dir = paths.instance_dir(SWARM, "k")
    async with running_agent(tmp_path, "You said: {{input}}") as orchestrator:
        answer = await orchestrator.ask("k", "hello")
        assert answer.status == "ok"
        assert sorted(p.name for p in key_dir.iterdir()) == [f"{AGENT}+events.jsonl"]
        again = await orchestrator.ask("k", "more")
        assert again.status == "ok"
        stored = read_messages(paths.conversation_dir(SWARM, "k", AGENT))
        assert [m.content for m in stored] == ["hello", "You said: hello", "more", "You said: more"]
        assert (await drop(orchestrator, "k")).dropped
        assert list(key_dir.iterdir()) == []


async def test_a_conversation_of_the_older_layout_goes_on_where_it_is(tmp_path: Path) -> None:
    paths = StatePaths.at(tmp_path / "state")
    directory = paths.conversation_dir(SWARM, "old", AGENT)
    directory.mkdir(parents=True)
    (directory / "events.jsonl").write_bytes(OLDER_EVENTS)
    async with running_agent(tmp_path, "You said: {{input}}") as orchestrator:
        answer = await orchestrator.ask("old", "after")
        assert answer.status == "ok"
        # continued in place: nothing beside the directory
        assert [p.name for p in directory.parent.iterdir()] == [AGENT]
        stored = read_messages(directory)
        assert [m.content for m in stored] == [
            "before",
            "You said: before",
            "after",
            "You said: after",
        ]
        assert (await drop(orchestrator, "old")).dropped
        assert list(directory.parent.iterdir()) == []


async def test_a_new_conversation_joins_a_key_another_agent_uses(tmp_path: Path) -> None:
    paths = StatePaths.at(tmp_path / "state")
    key_dir = key_another_agent_uses(paths, "shared")
    async with running_agent(tmp_path, "You said: {{input}}") as orchestrator:
        answer = await orchestrator.ask("shared", "hello")
        assert answer.status == "ok"
        assert sorted(p.name for p in key_dir.iterdir()) == [
            f"{AGENT}+events.jsonl",
            "other+events.jsonl",
        ]
        stored = read_messages(paths.conversation_dir(SWARM, "shared", AGENT))
        assert [m.content for m in stored] == ["hello", "You said: hello"]
        assert (key_dir / "other+events.jsonl").read_bytes() == OTHERS_EVENTS
