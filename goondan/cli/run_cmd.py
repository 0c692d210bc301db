"""`goondan run`: the orchestrator in the foreground."""

from __future__ import annotations

import argparse
import os
import sys

from goondan.settings import from_run_args


def run(args: argparse.Namespace) -> int:
    settings = from_run_args(args)
    if args.log_level:
        os.environ["GOONDAN_LOG_LEVEL"] = args.log_level  # agent processes inherit it
    if settings.daemon.spawn == "zygote":
        # First, before the imports below: the agent template imports the agent runtime
        # while this process imports the orchestrator and loads the bundle.
        from orchestrator.launcher import start_template_early

        start_template_early(args.path)

    import uvloop

    from goondan.bundle import BundleInvalid, load_bundle
    from goondan.logs import configure_logging
    from goondan.paths import StatePaths
    from ipc.endpoints import EndpointError
    from orchestrator.daemon import Daemon
    from orchestrator.lock import AlreadyRunning

    configure_logging(args.log_level)
    try:
        bundle = load_bundle(args.path)
        daemon = Daemon(
            bundle,
            args.swarm,
            StatePaths.at(args.state_root),
            settings,
            watch=args.watch,
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
    live = None
    if args.input and sys.stdout.isatty() and not args.transcript:
        from goondan.cli.daemon_cmds import LiveView

        live = LiveView()
    daemon.on_update = live.update if live else None
    printed = False

    def on_answer(code: int, answer: str | None) -> None:
        # The answer goes out as soon as it is known, before the daemon's shutdown (its agents
        # drained, its sockets closed); the exit code still waits for the shutdown.
        nonlocal printed
        if answer is not None and live is None and not args.transcript:
            print(answer, file=sys.stdout if code == 0 else sys.stderr, flush=True)
            printed = True

    daemon.on_answer = on_answer
    try:
        code, answer = uvloop.run(daemon.serve(args.input))
    except (AlreadyRunning, EndpointError) as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return 1
    if args.transcript and daemon.input_trace_id:
        from goondan.cli.transcript import render_transcript

        print(render_transcript(daemon.paths, daemon.swarm.name, daemon.input_trace_id))
        print()
    if answer is not None and not printed:
        if live is not None and live.streamed and code == 0:
            print()  # the answer is on screen already
        else:
            print(answer, file=sys.stdout if code == 0 else sys.stderr)
    return code
