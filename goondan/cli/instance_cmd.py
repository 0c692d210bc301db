"""`goondan instance list|show|delete`: the conversations stored under the state root."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from agentproc.conversation import read_messages
from goondan.cli.client import ControlClient, daemon_running
from goondan.cli.prompt import confirm, declined
from goondan.cli.transcript import render_conversation
from goondan.paths import (
    BadInstanceKey,
    StatePaths,
    conversation_files,
    key_of,
    storage_name,
    stored_agents,
)
from goondan.settings import DEFAULTS
from ipc import wire


def run_instance(args: argparse.Namespace) -> int:
    paths = StatePaths.at(args.state_root)
    if args.action == "list":
        return _list(paths, args)
    if args.action == "show":
        return _show(paths, args)
    return _delete(paths, args)


def stored_instances(paths: StatePaths) -> list[dict[str, Any]]:
    rows = []
    for swarm_dir in sorted((paths.root / "swarms").glob("*")):
        for instance_dir in sorted((swarm_dir / "instances").glob("*")):
            agents = stored_agents(instance_dir)
            if not agents:
                continue
            updated = max(_mtime(d) for d in agents)
            rows.append(
                {
                    "swarm": swarm_dir.name,
                    "instanceKey": key_of(instance_dir.name) or instance_dir.name,
                    "agents": [d.name for d in agents],
                    "messages": sum(len(read_messages(d)) for d in agents),
                    "updatedAt": datetime.fromtimestamp(updated, UTC).isoformat(timespec="seconds"),
                }
            )
    return rows


def _list(paths: StatePaths, args: argparse.Namespace) -> int:
    rows = stored_instances(paths)
    if args.json or not sys.stdout.isatty():
        print(json.dumps(rows))
        return 0
    if not rows:
        print(f"no stored instances under {paths.root}")
        return 0
    print(f"{'SWARM':<16} {'INSTANCE KEY':<28} {'MESSAGES':>8}  {'UPDATED':<25} AGENTS")
    for row in rows:
        print(
            f"{row['swarm']:<16} {row['instanceKey']:<28} {row['messages']:>8}  "
            f"{row['updatedAt']:<25} {', '.join(row['agents'])}"
        )
    return 0


def _show(paths: StatePaths, args: argparse.Namespace) -> int:
    try:
        name = storage_name(args.key)
    except BadInstanceKey as exc:
        print(f"goondan: {exc.code}: {exc}", file=sys.stderr)
        return 1
    swarms = [s for s in paths.stored_swarms(args.key) if args.swarm in (None, s)]
    if not swarms:
        where = f"swarm '{args.swarm}' under {paths.root}" if args.swarm else str(paths.root)
        print(f"goondan: no stored instance '{args.key}' in {where}", file=sys.stderr)
        return 1
    # One conversation per (swarm, agent): the agents of an instance each keep their own.
    found = [
        (swarm, agent)
        for swarm in swarms
        for agent in stored_agents(paths.root / "swarms" / swarm / "instances" / name)
        if args.agent in (None, agent.name)
    ]
    if not found:
        agents = sorted(
            d.name
            for swarm in swarms
            for d in stored_agents(paths.root / "swarms" / swarm / "instances" / name)
        )
        print(
            f"goondan: instance '{args.key}' has no conversation of agent '{args.agent}' "
            f"(its agents: {', '.join(agents) or 'none'}) under {paths.root}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        rows = [
            {
                "swarm": swarm,
                "instanceKey": args.key,
                "agent": agent.name,
                "messages": msgspec.to_builtins(read_messages(agent)),
            }
            for swarm, agent in found
        ]
        print(json.dumps(rows, ensure_ascii=False, indent=2 if sys.stdout.isatty() else None))
        return 0
    for index, (swarm, agent) in enumerate(found):
        messages = read_messages(agent)
        if index:
            print()
        count = f"{len(messages)} message{'s' if len(messages) != 1 else ''}"
        print(f"=== {swarm}/{args.key} · agent {agent.name} · {count} ===")
        for line in render_conversation(messages, full=args.full):
            print(line)
    return 0


def _delete(paths: StatePaths, args: argparse.Namespace) -> int:
    try:
        storage_name(args.key)
    except BadInstanceKey as exc:
        print(f"goondan: {exc.code}: {exc}", file=sys.stderr)
        return 1
    stored = [s for s in paths.stored_swarms(args.key) if args.swarm in (None, s)]
    if not stored and not daemon_running(paths):
        print(f"goondan: no stored instance '{args.key}' under {paths.root}", file=sys.stderr)
        return 1
    what = f"instance '{args.key}'" + (f" in swarm {', '.join(stored)}" if stored else "")
    workdir = " and its tool workdir" if args.workdir else ""
    if not confirm(f"Delete the conversations of {what}{workdir}?", yes=args.yes):
        return declined()
    if daemon_running(paths):
        # The daemon's agents may hold the conversation in memory: they drop it first.
        with ControlClient(paths) as client:
            reply = client.command(
                "instance.delete",
                wire.InstanceDeleteArgs(args.key, args.swarm, args.workdir),
                timeout_s=DEFAULTS.daemon.instance_drop_timeout_s + 5,
            )
        if not reply.ok:
            error = reply.error
            print(f"goondan: {error.message if error else 'delete failed'}", file=sys.stderr)
            return 1
        for name in wire.decode_result(reply, wire.Deleted).deleted:
            print(f"deleted {name}")
        return 0
    for swarm in stored:
        paths.delete_instance(swarm, args.key, workdir=args.workdir)
        print(f"deleted {swarm}/{storage_name(args.key)}")
    return 0


def _mtime(directory: Path) -> float:
    """When an agent's instance last changed: its conversation's files, and its directory's
    entries if it has one."""
    base, events, _ = conversation_files(directory)
    found = [p.stat().st_mtime for p in (base, events) if p.exists()]
    if directory.is_dir():
        found.extend(p.stat().st_mtime for p in directory.iterdir())
        found.append(directory.stat().st_mtime)
    return max(found, default=0.0)
