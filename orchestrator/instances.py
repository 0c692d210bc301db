"""Instances prepared with `agents__spawn`, and who asked for them (`agents__list`); and the
deletion of an instance while the daemon runs (`goondan instance delete`)."""

from __future__ import annotations

import asyncio
import secrets
import time

from goondan.paths import StatePaths
from ipc import wire
from ipc.error_codes import ErrorCode
from orchestrator.control import AgentCalls, CommandError


class InstanceRegistry:
    def __init__(self) -> None:
        self._instances: dict[tuple[str, str], wire.SpawnedInstance] = {}

    def spawn(
        self, target: str, instance_key: str | None, owner: str, owner_key: str
    ) -> wire.SpawnedInstance:
        key = instance_key or f"{target}-instance-{secrets.token_hex(4)}"
        existing = self._instances.get((target, key))
        if existing is not None:
            return existing
        instance = wire.SpawnedInstance(target, key, owner, owner_key, time.time())
        self._instances[(target, key)] = instance
        return instance

    def forget(self, key: str) -> None:
        """A deleted instance is no longer listed."""
        for spawned in [k for k in self._instances if k[1] == key]:
            del self._instances[spawned]

    def list(self, owner: str, owner_key: str, include_all: bool) -> list[wire.SpawnedInstance]:
        return [
            i
            for i in self._instances.values()
            if include_all or (i.owner_agent, i.owner_instance_key) == (owner, owner_key)
        ]

    def handle(self, caller: str, command: wire.Control, agents: set[str]) -> wire.ControlReply:
        """`agents__spawn` / `agents__list` from the tools of agent `caller`."""
        declared = wire.AGENT_COMMANDS.get(command.command)
        if declared is None:
            message = f"unknown agent command '{command.command}'"
            return wire.ControlReply(
                False, error=wire.ErrorInfo(ErrorCode.E_UNKNOWN_COMMAND, message)
            )
        try:
            args = wire.decode_args(command, declared.args)
        except wire.BadArgs as exc:
            return wire.ControlReply(False, error=wire.ErrorInfo(ErrorCode.E_BAD_REQUEST, str(exc)))
        if isinstance(args, wire.SpawnArgs):
            if args.target not in agents:
                known = ", ".join(sorted(agents))
                error = wire.ErrorInfo(
                    ErrorCode.AGENT_NOT_FOUND,
                    f"Agent '{args.target}' is not in this swarm (agents: {known})",
                )
                return wire.ControlReply(False, error=error)
            instance = self.spawn(args.target, args.instance_key or None, caller, args.owner)
            return wire.ControlReply(True, wire.Spawned(args.target, instance.instance_key))
        assert isinstance(args, wire.ListArgs)
        found = self.list(caller, args.owner, args.include_all)
        return wire.ControlReply(True, wire.Listed(len(found), found))


async def delete_instance(
    paths: StatePaths,
    swarm: str,
    key: str,
    *,
    workdir: bool,
    running_agents: list[str],
    calls: AgentCalls,
    timeout_s: float,
) -> bool:
    """Delete instance `key` of `swarm` while the daemon runs: every running agent drops it
    from memory and removes its own files (after a turn of it that is running), then the rest
    is removed; each agent has `timeout_s` for it. Raises CommandError when an agent could
    not; False when nothing was there."""
    drop = wire.control("instance.drop", wire.InstanceDropArgs(key))
    replies = await asyncio.gather(*(calls.call(name, drop, timeout_s) for name in running_agents))
    failed = [
        f"{name}: {reply.error.message if reply.error else 'failed'}"
        for name, reply in zip(running_agents, replies, strict=True)
        if not reply.ok and (reply.error is None or reply.error.code != ErrorCode.E_AGENT_GONE)
    ]
    if failed:
        raise CommandError(
            ErrorCode.E_INSTANCE_BUSY, "the instance was not deleted: " + "; ".join(failed)
        )
    dropped = any(reply.ok and wire.decode_result(reply, wire.Dropped).dropped for reply in replies)
    return paths.delete_instance(swarm, key, workdir=workdir) or dropped
