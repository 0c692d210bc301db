"""Instances prepared with `agents__spawn`, and who asked for them (`agents__list`); and the
deletion of an instance while the daemon runs (`goondan instance delete`)."""

from __future__ import annotations

import asyncio
import os
import secrets
import time

import msgspec

from goondan.paths import BadInstanceKey, StatePaths, SwarmPaths
from ipc import wire
from ipc.error_codes import ErrorCode
from orchestrator.control import AgentCalls, CommandError


class InstanceRegistry:
    def __init__(self, dirs: SwarmPaths | None = None) -> None:
        self._instances: dict[tuple[str, str], wire.SpawnedInstance] = {}
        self._dirs = dirs

    def spawn(
        self,
        target: str,
        instance_key: str | None,
        owner: str,
        owner_key: str,
        cwd: str | None = None,
    ) -> wire.SpawnedInstance:
        """Raises OSError when the working directory cannot be recorded."""
        key = instance_key or f"{target}-instance-{secrets.token_hex(4)}"
        existing = self._instances.get((target, key))
        if existing is not None:
            return existing
        if cwd and self._dirs is not None:
            # Recorded where the target's process reads it when it loads the instance, so it
            # holds across the target's restarts and the daemon's.
            path = self._dirs.cwd_file(key, target)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(cwd, encoding="utf-8")
        instance = wire.SpawnedInstance(
            target, key, owner, owner_key, time.time(), cwd or msgspec.UNSET
        )
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
            if args.cwd is not None and not os.path.isabs(args.cwd):
                message = f"cwd must be an absolute path, got {args.cwd!r}"
                return wire.ControlReply(
                    False, error=wire.ErrorInfo(ErrorCode.E_BAD_REQUEST, message)
                )
            try:
                instance = self.spawn(
                    args.target, args.instance_key or None, caller, args.owner, args.cwd
                )
            except (OSError, BadInstanceKey) as exc:
                message = f"could not prepare the instance: {exc}"
                return wire.ControlReply(
                    False, error=wire.ErrorInfo(ErrorCode.E_BAD_REQUEST, message)
                )
            reply = wire.Spawned(args.target, instance.instance_key, cwd=instance.cwd)
            return wire.ControlReply(True, reply)
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
