"""The message and command declarations of `ipc.wire`, and the tables built from them."""

from __future__ import annotations

import asyncio
from typing import Any, get_args

import msgspec
import pytest

from agentproc.process import AgentProcess
from ipc import wire
from orchestrator.connector_child import ConnectorProcess
from orchestrator.control import ControlCommands
from orchestrator.daemon import Daemon
from orchestrator.instances import InstanceRegistry
from orchestrator.trust import SENDS


def test_every_message_tag_is_declared_once_with_its_payload():
    assert set(wire.MESSAGES) == set(get_args(wire.MessageTag))
    for tag, message in wire.MESSAGES.items():
        assert message.tag == tag
        assert issubclass(message.payload, msgspec.Struct)
        assert message.sent_by or message.received_by, tag


def test_the_allow_list_comes_from_the_declarations():
    assert SENDS == {"agent": wire.sent_by("agent"), "connector": wire.sent_by("connector")}
    assert wire.CONNECTOR_EVENT in SENDS["connector"] and wire.CONNECTOR_EVENT not in SENDS["agent"]
    assert wire.RESTART_REQUEST not in SENDS["connector"]


def test_the_daemon_has_a_handler_for_each_type_a_kind_sends_and_no_other():
    # The table holds bound methods only: building it needs no running daemon.
    handlers = Daemon._agent_handlers(object.__new__(Daemon))
    assert {kind: set(table) for kind, table in handlers.items()} == {
        kind: set(wire.sent_by(kind)) for kind in ("agent", "connector")
    }


def test_the_agent_process_handles_each_type_it_receives():
    handlers = AgentProcess._message_handlers(object.__new__(AgentProcess))
    assert set(handlers) == wire.received_by("agent")


def test_the_connector_child_handles_each_type_it_receives():
    handlers = ConnectorProcess._message_handlers(object.__new__(ConnectorProcess))
    assert set(handlers) == wire.received_by("connector")


def _bytes(control: wire.Control) -> bytes:
    return msgspec.msgpack.encode(control)


def test_control_keeps_its_wire_encoding():
    """Old CLIs and external drivers send plain maps: the bytes stay the same."""
    assert _bytes(wire.control("status")) == msgspec.msgpack.encode({"command": "status"})
    assert _bytes(wire.control("restart", wire.RestartArgs())) == (
        msgspec.msgpack.encode({"command": "restart"})
    )
    drop = wire.control("instance.drop", wire.InstanceDropArgs("k"))
    assert _bytes(drop) == msgspec.msgpack.encode(
        {"command": "instance.drop", "args": {"instanceKey": "k"}}
    )
    spawn = wire.SpawnArgs("worker", None, "owner-key")
    assert msgspec.msgpack.decode(_bytes(wire.control("spawn", spawn))) == {
        "command": "spawn",
        "args": {"target": "worker", "owner": "owner-key"},
    }


def _control(command: str, args: Any) -> wire.Control:
    """A `control` payload as any client may send it, decoded as a receiver does."""
    frame = wire.encode(
        wire.CONTROL,
        "cli",
        wire.ORCHESTRATOR,
        msgspec.Raw(msgspec.msgpack.encode({"command": command, "args": args})),
    )
    return wire.decode_payload(wire.decode(frame), wire.Control)


def test_old_style_args_decode_with_each_commands_struct():
    old = _control("instance.delete", {"instanceKey": "k", "swarm": None, "workdir": True})
    assert wire.decode_args(old, wire.InstanceDeleteArgs) == wire.InstanceDeleteArgs(
        "k", None, True
    )
    assert wire.decode_args(_control("status", {}), wire.StatusArgs) == wire.StatusArgs()
    assert wire.decode_args(wire.control("stop"), wire.StopArgs) == wire.StopArgs()


def test_every_command_declares_its_args_and_result_structs():
    commands = {**wire.CLI_COMMANDS, **wire.AGENT_COMMANDS, **wire.DAEMON_COMMANDS}
    assert len(commands) == len(wire.CLI_COMMANDS) + len(wire.AGENT_COMMANDS) + len(
        wire.DAEMON_COMMANDS
    )
    results = set(get_args(wire.ControlResult))
    for declared in commands.values():
        assert declared.args in get_args(wire.ControlArgs)
        assert set(get_args(declared.result) or [declared.result]) <= results


async def _echo(args: Any) -> Any:
    """Answers `restart` (the one test that reaches a handler) with its args, as Restarted."""
    return wire.Restarted([args.agent], args.fresh)


def _commands() -> ControlCommands:
    return ControlCommands({name: _echo for name in wire.CLI_COMMANDS}, wire.CLI_COMMANDS)


@pytest.mark.parametrize(
    ("command", "args", "field"),
    [
        ("restart", {"fresh": "yes"}, "$.fresh"),
        ("instance.delete", {"instanceKey": 5}, "$.instanceKey"),
        ("instance.delete", {}, "instanceKey"),
        ("restart", [1, 2], "object"),
    ],
)
def test_a_command_with_bad_args_is_answered_with_an_error(command, args, field):
    reply = asyncio.run(_commands().run(_control(command, args)))
    assert not reply.ok and reply.error is not None
    assert reply.error.code == "E_BAD_REQUEST"
    assert f"'{command}'" in reply.error.message and field in reply.error.message


def test_good_args_reach_the_handler_typed():
    reply = asyncio.run(_commands().run(_control("restart", {"agent": "a", "fresh": True})))
    assert reply.ok and reply.result == wire.Restarted(["a"], True)


def test_a_handler_returning_an_undeclared_result_is_an_internal_error():
    async def wrong(args: Any) -> Any:
        return {"restarted": ["a"]}  # plain data, not the declared Struct

    handlers = {name: wrong for name in wire.CLI_COMMANDS}
    reply = asyncio.run(ControlCommands(handlers, wire.CLI_COMMANDS).run(_control("stop", {})))
    assert reply.error is not None and reply.error.code == "E_INTERNAL"
    assert "'stop' returned dict" in reply.error.message


def test_an_unknown_command_is_answered_with_an_error():
    reply = asyncio.run(_commands().run(_control("explode", {})))
    assert reply.error is not None and reply.error.code == "E_UNKNOWN_COMMAND"
    assert "status" in reply.error.message  # the known ones are listed


def test_handlers_must_match_the_declared_commands():
    with pytest.raises(ValueError):
        ControlCommands({"status": _echo}, wire.CLI_COMMANDS)


def test_agent_commands_with_bad_args_are_answered_with_an_error():
    registry = InstanceRegistry()
    reply = registry.handle("a", _control("spawn", {"instanceKey": "k"}), {"a", "b"})
    assert reply.error is not None and reply.error.code == "E_BAD_REQUEST"
    assert "'spawn'" in reply.error.message and "target" in reply.error.message
    reply = registry.handle("a", _control("list", {"includeAll": "no"}), {"a"})
    assert reply.error is not None and reply.error.code == "E_BAD_REQUEST"
    reply = registry.handle("a", _control("spawn", {"target": "b", "owner": "o"}), {"a", "b"})
    assert reply.ok and isinstance(reply.result, wire.Spawned)
    listed = registry.handle("a", _control("list", {"owner": "o"}), {"a", "b"})
    assert listed.ok and isinstance(listed.result, wire.Listed) and listed.result.count == 1
    # a typed result goes on the wire as the map it always was
    spawned = msgspec.msgpack.decode(msgspec.msgpack.encode(reply.result))
    assert spawned == {"target": "b", "instanceKey": spawned["instanceKey"], "spawned": True}
    assert list(msgspec.msgpack.decode(msgspec.msgpack.encode(listed.result))) == [
        "count",
        "agents",
    ]


def _reply_bytes(result: msgspec.Struct) -> bytes:
    return msgspec.msgpack.encode(wire.ControlReply(True, result))


def test_command_results_keep_their_wire_encoding() -> None:
    """`goondan status --json` and scripts read these maps: the keys stay as they were."""
    row = wire.ProcessInfo("a", "agent", 12, "ready", 0)
    status = wire.Status(1, "s", "/b", "a", 1.5, "/state", [row])
    assert _reply_bytes(status) == msgspec.msgpack.encode(
        {
            "ok": True,
            "result": {
                "pid": 1,
                "swarm": "s",
                "bundle": "/b",
                "entryAgent": "a",
                "startedAt": 1.5,
                "stateRoot": "/state",
                "processes": [
                    {"name": "a", "kind": "agent", "pid": 12, "status": "ready", "restarts": 0}
                ],
            },
        }
    )
    reloaded = wire.Reloaded(True, ["a"], [], ["b"])
    assert _reply_bytes(reloaded) == msgspec.msgpack.encode(
        {
            "ok": True,
            "result": {"reloaded": True, "restarted": ["a"], "added": [], "removed": ["b"]},
        }
    )
    restarted = wire.Restarted(["a"], False)
    assert _reply_bytes(restarted) == msgspec.msgpack.encode(
        {"ok": True, "result": {"restarted": ["a"], "fresh": False}}
    )
    spawned = wire.SpawnedInstance("w", "k", "a", "ak", 2.0)
    assert _reply_bytes(wire.Listed(1, [spawned])) == msgspec.msgpack.encode(
        {
            "ok": True,
            "result": {
                "count": 1,
                "agents": [
                    {
                        "target": "w",
                        "instanceKey": "k",
                        "ownerAgent": "a",
                        "ownerInstanceKey": "ak",
                        "createdAt": 2.0,
                    }
                ],
            },
        }
    )


def test_a_client_reads_a_result_with_its_commands_type() -> None:
    reply = msgspec.msgpack.decode(
        _reply_bytes(wire.Reloaded(True, ["a"], ["c"], [])), type=wire.ControlReply
    )
    assert wire.decode_result(reply, wire.Reloaded) == wire.Reloaded(True, ["a"], ["c"], [])
    with pytest.raises(wire.MalformedFrame, match="bad Status result"):
        wire.decode_result(reply, wire.Status)
