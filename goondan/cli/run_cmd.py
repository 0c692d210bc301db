"""`goondan run`: the orchestrator in the foreground."""

from __future__ import annotations

import argparse
import os
import sys

import structlog
import uvloop

from goondan.bundle import BundleInvalid, load_bundle
from goondan.cli.daemon_cmds import LiveView
from goondan.cli.transcript import render_transcript
from goondan.envfiles import EnvFileError, EnvFiles
from goondan.logs import configure_logging
from goondan.paths import StatePaths
from goondan.settings import from_run_args
from ipc.endpoints import EndpointError
from orchestrator.daemon import Daemon
from orchestrator.lock import AlreadyRunning


def run(args: argparse.Namespace) -> int:
    # First: the files may set GOONDAN_STATE_ROOT or GOONDAN_LOG_LEVEL (flags still win).
    env_files = EnvFiles(args.path, args.env_file or ())
    try:
        env_files.load()
    except EnvFileError as exc:
        for error in exc.errors:
            print(error.render(), file=sys.stderr)
        print("goondan: the env files have problems; nothing was started", file=sys.stderr)
        return 1
    if args.log_level:
        os.environ["GOONDAN_LOG_LEVEL"] = args.log_level  # agent processes inherit it
    configure_logging(args.log_level)
    if env_files.layer.files:  # names and files only: values never reach the logs
        structlog.get_logger().info(
            "env files loaded", files=list(env_files.layer.files), names=sorted(env_files.applied)
        )
    try:
        bundle = load_bundle(args.path)
        daemon = Daemon(
            bundle,
            args.swarm,
            StatePaths.at(args.state_root),
            from_run_args(args),
            watch=args.watch,
            env_files=env_files,
        )
    except BundleInvalid as exc:
        for error in exc.errors:
            print(error.render(), file=sys.stderr)
        print(
            f"goondan: {len(exc.errors)} problem(s) in the bundle; nothing was started",
            file=sys.stderr,
        )
        return 1
    except LookupError as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return 1
    live = LiveView() if args.input and sys.stdout.isatty() and not args.transcript else None
    daemon.on_update = live.update if live else None
    try:
        code, answer = uvloop.run(daemon.serve(args.input))
    except (AlreadyRunning, EndpointError) as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return 1
    if args.transcript and daemon.input_trace_id:
        print(render_transcript(daemon.paths, daemon.swarm.name, daemon.input_trace_id))
        print()
    if answer is not None:
        if live is not None and live.streamed and code == 0:
            print()  # the answer is on screen already
        else:
            print(answer, file=sys.stdout if code == 0 else sys.stderr)
    return code
