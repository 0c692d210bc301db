"""`approvals`, `approve`, `deny`: the tool calls waiting for a human, and the decision."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time

from goondan.cli.client import ControlClient, with_daemon
from goondan.paths import StatePaths
from ipc import wire

EXIT_FAILED = 1


def run_approvals(args: argparse.Namespace) -> int:
    work = _list if args.command == "approvals" else _decide
    return with_daemon(StatePaths.at(args.state_root), lambda client: work(client, args))


def decided_by() -> str:
    """Who decides: the OS user running this command (control.sock admits only the daemon's
    own user, so the uid is the same as the daemon's; the name says which login it was)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user} (uid {os.getuid()})"


def _list(client: ControlClient, args: argparse.Namespace) -> int:
    reply = client.command("approvals")
    if not reply.ok:
        return _failed("approvals", reply)
    listed = wire.decode_result(reply, wire.Approvals)
    if args.json or not sys.stdout.isatty():
        rows = [
            {
                "id": a.id,
                "agent": a.agent,
                "instanceKey": a.instance_key,
                "tool": a.tool,
                "args": a.args,
                "createdAt": a.created_at,
                "expiresAt": a.expires_at,
            }
            for a in listed.approvals
        ]
        print(json.dumps(rows, indent=2 if args.json and sys.stdout.isatty() else None))
        return 0
    if not listed.approvals:
        print("no tool call waits for approval")
        return 0
    now = time.time()
    print(f"{'ID':<16} {'AGENT':<16} {'INSTANCE':<20} {'TOOL':<24} {'AGE':>6}  ARGUMENTS")
    for a in listed.approvals:
        arguments = json.dumps(a.args, ensure_ascii=False)
        if len(arguments) > 60:
            arguments = arguments[:57] + "..."
        age = _age(now - a.created_at)
        print(f"{a.id:<16} {a.agent:<16} {a.instance_key:<20} {a.tool:<24} {age:>6}  {arguments}")
    return 0


def _decide(client: ControlClient, args: argparse.Namespace) -> int:
    reason = getattr(args, "reason", None) or ""
    reply = client.command(args.command, wire.DecideArgs(args.id, reason, decided_by()))
    if not reply.ok:
        return _failed(args.command, reply)
    decided = wire.decode_result(reply, wire.Decided)
    print(f"{decided.id} {decided.decision} by {decided.decided_by}")
    return 0


def _failed(command: str, reply: wire.ControlReply) -> int:
    error = reply.error
    text = f"{error.code}: {error.message}" if error else "?"
    print(f"goondan {command}: {text}", file=sys.stderr)
    return EXIT_FAILED


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"
