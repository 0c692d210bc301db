"""`goondan instance list|delete`: the conversations stored under the state root."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentproc.conversation import read_messages
from goondan.cli.client import daemon_running
from goondan.paths import StatePaths, slug


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
                    "instanceKey": instance_dir.name,
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
    if daemon_running(paths):
        print(
            "goondan: an orchestrator is running on this state root and may hold this "
            "conversation; stop it first (or use `goondan restart --agent NAME --fresh`)",
            file=sys.stderr,
        )
        return 1
    targets = [
        d
        for d in (paths.root / "swarms").glob(f"*/instances/{slug(args.key)}")
        if args.swarm is None or d.parent.parent.name == slug(args.swarm)
    ]
    if not targets:
        print(f"goondan: no stored instance '{args.key}' under {paths.root}", file=sys.stderr)
        return 1
    for directory in targets:
        shutil.rmtree(directory)
        workdir = directory.parent.parent / "workspaces" / directory.name
        if args.workdir and workdir.exists():
            shutil.rmtree(workdir)
        print(f"deleted {directory.parent.parent.name}/{directory.name}")
    return 0


def _mtime(directory: Path) -> float:
    return max((p.stat().st_mtime for p in directory.iterdir()), default=directory.stat().st_mtime)
