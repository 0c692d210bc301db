"""A connector process: one per Connection, started and supervised by the orchestrator.

    python -m orchestrator.connector_child --connection NAME --bundle PATH \\
        --endpoint ipc://... --state-root DIR --parent-pid PID [--credential-fd N]

It connects a DEALER as `connection:NAME` (presenting the credential read from the inherited
pipe N, which the orchestrator checks), loads the Connection (config and secrets resolved from
the environment), imports the Connector's entry, sends `ready` and runs `await main(ctx)`,
heartbeating while it sends nothing else. On `shutdown` (or SIGTERM) it sets `ctx.stopping`,
gives `main` most of the grace period to return, cancels it, sends `shutdown_ack` (for a
`shutdown`) and exits 0.

Exit codes: 0 stopped, or `main` returned; 1 `main` crashed (respawn); 3 start error, also sent
as `start_error` (the Connection needs fixing: bad bundle, unset env, no `main`, or `main`
raised `ConnectorConfigError`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable

import structlog

from goondan.connectors import (
    ConnectionSetup,
    ConnectorConfigError,
    ConnectorContext,
    ConnectorMain,
    SecretRedactor,
    import_main,
    install_redaction,
    load_connection,
)
from goondan.hardening import forbid_inspection
from goondan.logs import configure_logging, record_last_error
from goondan.orphans import die_with_parent
from goondan.paths import StatePaths
from goondan.proctitle import set_title
from goondan.settings import DEFAULTS, Settings
from ipc import wire
from ipc.credential import properties, read_credential_fd
from ipc.dealer import Dealer, send_once
from ipc.error_codes import ErrorCode
from ipc.tasks import TaskSet
from orchestrator.throttled_log import ThrottledLog

SIGTERM_GRACE_MS = 5_000
MAIN_SHARE_OF_GRACE = 0.75  # the rest is for cancelling main, acking and closing
EXIT_OK, EXIT_CRASHED, EXIT_START_ERROR = 0, 1, 3


class ConnectorProcess:
    def __init__(
        self,
        setup: ConnectionSetup,
        main: ConnectorMain,
        endpoint: str,
        credential: bytes | None = None,
        settings: Settings = DEFAULTS,
    ):
        self.ctx = ConnectorContext(
            connection_name=setup.connection,
            connector_name=setup.connector,
            config=setup.config,
            secrets=setup.secrets,
            send=self.send,
        )
        self.main = main
        self.log = structlog.get_logger().bind(connection=setup.connection)
        self.channel = Dealer(
            endpoint,
            self.ctx.identity,
            self.on_frames,
            on_disconnect=self._disconnected,
            properties=properties(credential),
        )
        self._stop = asyncio.Event()
        self._shutdown: wire.Shutdown | None = None
        self._heartbeat_interval_s = settings.heartbeat_interval_s()
        self._handlers = self._message_handlers()
        self._dropped = ThrottledLog(self.log)  # a flood of odd frames must not flood the log

    def send(self, frame: bytes) -> None:
        self.channel.send([frame])

    def _disconnected(self, reason: str) -> None:
        self.log.warning("lost the orchestrator's socket; reconnecting", reason=reason)

    def _message_handlers(self) -> dict[str, Callable[[wire.Envelope], None]]:
        """`{type: handler}` for the types a connector receives (`wire.received_by`)."""
        return {
            wire.EVENT_ACK: self._on_answer,
            wire.DELEGATE_RESULT: self._on_answer,
            wire.TRACE_CANCELLED: self._on_answer,
            wire.SHUTDOWN: self._on_shutdown,
        }

    def on_frames(self, frames: list[bytes]) -> None:
        for frame in frames:
            try:
                env = wire.decode(frame)
                handler = self._handlers.get(env.type)
                if handler is None:
                    self._dropped.warning("dropped frame of unknown type", env.type, type=env.type)
                else:
                    handler(env)
            except wire.MalformedFrame as exc:
                self.log.warning("dropped malformed frame", error=str(exc))
            except Exception:  # never let one message take the reader down
                self.log.exception("failed to handle a frame")

    def _on_answer(self, env: wire.Envelope) -> None:
        self.ctx.handle(env)  # the event's ack, the answer it asked for, a cancel's outcome

    def _on_shutdown(self, env: wire.Envelope) -> None:
        self._shutdown = wire.decode_payload(env, wire.Shutdown)
        self._stop.set()

    def request_stop(self) -> None:
        """SIGTERM: stop as for a `shutdown`, without an ack (nobody asked for one)."""
        self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.channel.start()
        ready = wire.Ready(wire.PROTOCOL_VERSION, os.getpid(), self.ctx.identity)
        self.send(wire.encode(wire.READY, self.ctx.identity, wire.ORCHESTRATOR, ready))
        self.log.info("connector started", connector=self.ctx.connector_name, pid=os.getpid())
        background = TaskSet("connector process")
        background.spawn(self._heartbeat(), name="heartbeat")
        stop_task = background.spawn(self._stop.wait(), name="wait for stop")
        # Not in the set: `_stop_main` bounds how long it waits for a `main` that ignores
        # its cancellation, where closing the set would wait for ever.
        main_task = loop.create_task(self._run_main(), name="connector main")
        await asyncio.wait({main_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        code = EXIT_OK
        if main_task.done():
            code = main_task.result()
        else:
            code = await self._stop_main(main_task)
        await background.close()
        if self._shutdown is not None:
            self.send(wire.encode(wire.SHUTDOWN_ACK, self.ctx.identity, wire.ORCHESTRATOR))
        await self._close()
        return code

    async def _run_main(self) -> int:
        try:
            await self.main(self.ctx)
        except ConnectorConfigError as exc:
            self.log.error("connector cannot run", error=str(exc))
            error = wire.ErrorInfo(ErrorCode.E_CONNECTOR_START, str(exc))
            self.send(wire.encode(wire.START_ERROR, self.ctx.identity, wire.ORCHESTRATOR, error))
            return EXIT_START_ERROR
        except Exception:
            self.log.exception("connector crashed")
            return EXIT_CRASHED
        self.log.info("connector main returned")
        return EXIT_OK

    async def _stop_main(self, main_task: asyncio.Task[int]) -> int:
        grace_ms = self._shutdown.grace_period_ms if self._shutdown else SIGTERM_GRACE_MS
        grace = max(0.0, grace_ms / 1000)
        self.log.info("stopping connector", grace_s=grace)
        self.ctx.stopping.set()
        done, _ = await asyncio.wait({main_task}, timeout=grace * MAIN_SHARE_OF_GRACE)
        if not done:
            self.log.warning("connector did not stop within the grace period; cancelling it")
            main_task.cancel()
            await asyncio.wait({main_task}, timeout=max(0.1, grace * 0.15))
        if main_task.done() and not main_task.cancelled():
            code = main_task.result()
            return code if code == EXIT_START_ERROR else EXIT_OK
        return EXIT_OK

    async def _heartbeat(self) -> None:
        frame = wire.encode(wire.HEARTBEAT, self.ctx.identity, wire.ORCHESTRATOR)
        while True:
            await asyncio.sleep(self._heartbeat_interval_s)
            self.send(frame)

    async def _close(self) -> None:
        """Let the last frames (the ack) leave before closing: `Dealer.close` drops them."""
        await self.channel.flush(timeout_s=1.0)
        self.channel.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.connector_child")
    parser.add_argument("--connection", required=True)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--state-root", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--credential-fd", type=int)
    parser.add_argument("--settings", help="settings that differ from the defaults (JSON)")
    return parser.parse_args(argv)


async def _serve(
    args: argparse.Namespace, redactor: SecretRedactor, credential: bytes | None
) -> int:
    identity = f"connection:{args.connection}"
    log = structlog.get_logger()
    try:
        setup = load_connection(args.bundle, args.connection, os.environ)
        redactor.update(setup.secrets.values())
        main = import_main(setup)
    except ConnectorConfigError as exc:
        log.error("connector cannot start", error=str(exc))
        error = wire.ErrorInfo(ErrorCode.E_CONNECTOR_START, str(exc))
        await send_once(
            args.endpoint,
            identity,
            wire.encode(wire.START_ERROR, identity, wire.ORCHESTRATOR, error),
            properties=properties(credential),
        )
        return EXIT_START_ERROR
    settings = Settings.from_argv(args.settings)
    process = ConnectorProcess(setup, main, args.endpoint, credential, settings)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, process.request_stop)
    return await process.run()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_title(f"goondan: connector {args.connection}")
    credential = None if args.credential_fd is None else read_credential_fd(args.credential_fd)
    die_with_parent(args.parent_pid)
    forbid_inspection()
    # Ctrl-C in a terminal reaches the whole process group; the orchestrator decides for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging()
    redactor = SecretRedactor()  # filled with the secrets before anything can log them
    install_redaction(redactor)
    record_last_error(
        StatePaths.at(args.state_root).last_error_dir / f"connection:{args.connection}"
    )
    structlog.contextvars.bind_contextvars(connection=args.connection)
    try:
        import uvloop

        return uvloop.run(_serve(args, redactor, credential))
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
