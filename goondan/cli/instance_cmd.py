"""`goondan instance list|delete`: the conversations stored under the state root."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentproc.conversation import read_messages
from goondan.cli.client import ControlClient, daemon_running
from goondan.paths import BadInstanceKey, StatePaths, key_of, storage_name
from goondan.settings import DEFAULTS
from ipc import wire


def run_instance(args: argparse.Namespace) -> int:
    paths = StatePaths.at(args.state_root)
    if args.action == "list":
        return _list(paths, args)
    return _delete(paths, args)


def stored_instances(paths: StatePaths) -> list[dict[str, Any]]:
    rows = []
    for swarm_dir in sorted((paths.root / "swarms").glob("*")):
        for instance_dir in sorted((swarm_dir / "instances").glob("*")):
            agents = sorted(d for d in instance_dir.iterdir() if d.is_dir())
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


def _delete(paths: StatePaths, args: argparse.Namespace) -> int:
    try:
        storage_name(args.key)
    except BadInstanceKey as exc:
        print(f"goondan: {exc.code}: {exc}", file=sys.stderr)
        return 1
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
    swarms = [s for s in paths.stored_swarms(args.key) if args.swarm in (None, s)]
    if not swarms:
        print(f"goondan: no stored instance '{args.key}' under {paths.root}", file=sys.stderr)
        return 1
    for swarm in swarms:
        paths.delete_instance(swarm, args.key, workdir=args.workdir)
        print(f"deleted {swarm}/{storage_name(args.key)}")
    return 0


def _mtime(directory: Path) -> float:
    return max((p.stat().st_mtime for p in directory.iterdir()), default=directory.stat().st_mtime)
