"""`goondan cancel`: stop running turns through the daemon's control socket."""

from __future__ import annotations

import argparse
import json
import sys

import msgspec

from goondan.cli.client import ControlClient, with_daemon
from goondan.paths import StatePaths
from ipc import wire
from ipc.error_codes import ErrorCode

EXIT_NOTHING = 1
EXIT_USAGE = 2


def run_cancel(args: argparse.Namespace) -> int:
    if not args.all and args.agent is None and args.instance is None and args.trace is None:
        print(
            "goondan cancel: say which turns: --agent, --instance, --trace (or --all)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return with_daemon(StatePaths.at(args.state_root), lambda client: _cancel(client, args))


def _cancel(client: ControlClient, args: argparse.Namespace) -> int:
    reply = client.command(
        "cancel", wire.CancelArgs(args.agent, args.instance, args.trace, args.all), timeout_s=30
    )
    if not reply.ok:
        error = reply.error
        print(
            f"goondan: {error.code}: {error.message}" if error else "goondan: cancel failed",
            file=sys.stderr,
        )
        return (
            EXIT_USAGE if error is not None and error.code != ErrorCode.E_INTERNAL else EXIT_NOTHING
        )
    turns = wire.decode_result(reply, wire.Cancelled).turns
    if args.json:
        print(json.dumps(msgspec.to_builtins(turns)))
    else:
        for turn in turns:
            print(f"cancelled {turn.agent}/{turn.instance_key} trace {turn.trace_id}")
        if not turns:
            print("no running turn matched", file=sys.stderr)
    return 0 if turns else EXIT_NOTHING
