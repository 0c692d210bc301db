"""The connector API: what a Connector's `async def main(ctx)` receives, and what it may raise.

    from goondan import ConnectorContext

    async def main(ctx: ConnectorContext) -> None:
        ack = await ctx.emit("user_message", text="hi", instance_key="chat:42",
                             properties={"chat_id": 42})          # journaled and routed
        reply = await ctx.request("user_message", text="hi", instance_key="chat:42")
        ctx.logger.info("answered", chars=len(reply.text))       # secrets are redacted
        await ctx.stopping.wait()                                 # the orchestrator stops us

A connector owns its protocol (HTTP server, polling, ...). `emit` returns once the orchestrator
has journaled the event (an `event_ack`), so an HTTP connector can answer 2xx knowing the event
will not be lost; `request` also waits for the agent's answer. Property values are strings on the
wire: numbers and booleans are stringified (`true`/`false`, as upstream's `String(value)`).

The process side (`orchestrator/connector_child.py`) builds the context, feeds it the frames the
orchestrator sends (`handle`), and loads the Connection (`load_connection`, `import_main`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import itertools
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec
import structlog

from ipc import wire
from ipc.error_codes import ErrorCode

ACK_TIMEOUT_S = 10.0  # the orchestrator journals (fsync) and routes; it answers in milliseconds
DEFAULT_REPLY_TIMEOUT_S = 300.0
CANCEL_TIMEOUT_S = 30.0  # the agents stop their turns and settle their tool calls first
REDACTED = "[redacted]"
# Secrets shorter than this are redacted only where a whole logged value equals them: replacing
# every "ab" inside every log line would destroy the logs and still protect nothing real.
MIN_SUBSTRING_SECRET = 4

ConnectorMessage = wire.ConnectorMessage
ConnectorMain = Callable[["ConnectorContext"], Awaitable[None]]
T = TypeVar("T")


# -- errors ------------------------------------------------------------------------------------


class ConnectorError(Exception):
    """Base of the errors `emit` / `request` raise; `code` is a stable machine-readable code."""

    default_code = ErrorCode.E_CONNECTOR

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.message = message


class ConnectorConfigError(ConnectorError):
    """The connector cannot run as configured (missing token, bad port...): the user must fix
    the Connection. Raised from `main`, it stops the connector as a start error (exit 3), which
    the orchestrator reports instead of respawning it in a loop."""

    default_code = ErrorCode.E_CONNECTOR_CONFIG


class EventRefused(ConnectorError):
    """The orchestrator did not accept the event (no agent to route it to, shutting down...)."""

    default_code = ErrorCode.E_EVENT_REFUSED


class EventNotAcknowledged(ConnectorError):
    """No `event_ack` in time: the orchestrator is overloaded or gone. The event may or may not
    have been journaled; a connector whose source redelivers (polling) should not confirm it."""

    default_code = ErrorCode.E_EVENT_ACK_TIMEOUT


class ReplyFailed(ConnectorError):
    """The agent's turn ended in an error (`code` from the orchestrator, e.g. E_AGENT_CRASHED)."""

    default_code = ErrorCode.E_REPLY_FAILED


class ReplyTimeout(ConnectorError):
    default_code = ErrorCode.E_REPLY_TIMEOUT


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    """The orchestrator journaled and routed the event (a refusal raises `EventRefused`)."""

    correlation_id: str
    trace_id: str
    agent: str | None = None
    instance_key: str | None = None
    accepted: bool = True


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """(trace id, parent span id) of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), or
    None when it is absent or malformed (then the trace starts afresh, as the spec says)."""
    if not value:
        return None
    parts = value.strip().lower().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    trace_id, span_id = parts[1], parts[2]
    if len(trace_id) != 32 or len(span_id) != 16 or len(parts[3]) != 2:
        return None
    try:
        if int(trace_id, 16) == 0 or int(span_id, 16) == 0:
            return None
    except ValueError:
        return None
    return trace_id, span_id


@dataclass(frozen=True)
class Reply:
    text: str
    agent: str
    instance_key: str | None
    correlation_id: str
    trace_id: str = ""


class PendingReply:
    """An accepted event whose answer is still to come: `await pending.reply()`."""

    def __init__(self, ctx: ConnectorContext, ack: Ack, future: asyncio.Future[Any]) -> None:
        self.ack = ack
        self._ctx = ctx
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    async def reply(self, timeout_s: float | None = DEFAULT_REPLY_TIMEOUT_S) -> Reply:
        cid = self.ack.correlation_id
        try:
            # Not `asyncio.wait_for`: on 3.11 it returns the answer when our task is cancelled
            # in the moment the answer arrives, and a connector asked to stop would go on.
            async with asyncio.timeout(timeout_s):
                result: wire.DelegateResult = await self._future
        except TimeoutError:
            raise ReplyTimeout(f"no reply to event {cid} within {timeout_s:g} s") from None
        finally:
            self._ctx._results.pop(cid, None)
        if result.status != "ok":
            error = result.error or wire.ErrorInfo(ErrorCode.E_REPLY_FAILED, "the turn failed")
            raise ReplyFailed(f"{result.target or 'the agent'}: {error.message}", error.code)
        return Reply(
            result.response or "", result.target, result.instance_key, cid, self.ack.trace_id
        )


# -- events ------------------------------------------------------------------------------------


def stringify_property(value: object) -> str:
    """A property value as the wire carries it: booleans `true`/`false`, numbers as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    raise TypeError(f"property values must be strings, numbers or booleans, got {value!r}")


def stringify_properties(
    values: Mapping[str, object] | None, *, drop_invalid: bool = False
) -> dict[str, str]:
    """`{key: str}`; None values are left out. Other non-scalar values raise `TypeError`, or
    are left out with `drop_invalid` (for payloads from the outside world, as upstream does)."""
    out: dict[str, str] = {}
    for key, value in (values or {}).items():
        if value is None:
            continue
        try:
            out[str(key)] = stringify_property(value)
        except TypeError:
            if not drop_invalid:
                raise TypeError(
                    f"property '{key}': must be a string, number or boolean, "
                    f"got {type(value).__name__}"
                ) from None
    return out


def make_message(
    text: str | None = None, message: ConnectorMessage | Mapping[str, Any] | None = None
) -> ConnectorMessage:
    """The event's message: `text`, or an upstream-shaped `{type: text|image|file, ...}`."""
    if message is not None and text is not None:
        raise ValueError("pass either text or message, not both")
    if message is None:
        if text is None:
            raise ValueError("an event needs text (or a message: image/file by url)")
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return ConnectorMessage("text", text=text)
    if isinstance(message, Mapping):
        try:
            message = msgspec.convert(dict(message), ConnectorMessage)
        except msgspec.ValidationError as exc:
            raise ValueError(f"bad message: {exc}") from None
    if message.type == "text" and message.text is None:
        raise ValueError("a text message needs 'text'")
    if message.type in ("image", "file") and not message.url:
        raise ValueError(f"an {message.type} message needs 'url'")
    if message.type == "file" and not message.name:
        raise ValueError("a file message needs 'name'")
    return message


def build_event(
    name: str | Mapping[str, Any],
    *,
    text: str | None = None,
    instance_key: str | None = None,
    properties: Mapping[str, object] | None = None,
    message: ConnectorMessage | Mapping[str, Any] | None = None,
    reply: bool = False,
) -> wire.ConnectorEvent:
    """A validated `ConnectorEvent`. `name` may also be an upstream-shaped event object
    `{name, message, properties, instanceKey}` (then pass nothing else)."""
    if isinstance(name, Mapping):
        if text is not None or instance_key is not None or properties or message is not None:
            raise TypeError("pass an event object or keyword arguments, not both")
        raw = name
        name = raw.get("name")  # type: ignore[assignment]
        message = raw.get("message")
        instance_key = raw.get("instanceKey", raw.get("instance_key"))
        properties = raw.get("properties")
        if isinstance(message, str):
            text, message = message, None
    if not isinstance(name, str) or not name:
        raise ValueError("an event needs a non-empty name")
    if not isinstance(instance_key, str) or not instance_key:
        raise ValueError(
            f"event '{name}' needs a non-empty instance_key (the conversation "
            "it belongs to, e.g. 'telegram:<chat id>')"
        )
    return wire.ConnectorEvent(
        name=name,
        message=make_message(text, message),
        instance_key=instance_key,
        properties=stringify_properties(properties),
        reply=reply,
    )


# -- the context -------------------------------------------------------------------------------


class ConnectorContext:
    """What `main(ctx)` gets. Built by the connector process; tests may build one with their
    own `send` (one encoded frame per call) and feed it answers through `handle`."""

    def __init__(
        self,
        *,
        connection_name: str,
        connector_name: str,
        config: Mapping[str, str],
        secrets: Mapping[str, str],
        send: Callable[[bytes], None],
        logger: Any = None,
        ack_timeout_s: float = ACK_TIMEOUT_S,
    ) -> None:
        self.connection_name = connection_name
        self.connector_name = connector_name
        self.config: dict[str, str] = dict(config)
        self.secrets: dict[str, str] = dict(secrets)
        self.logger: Any = logger or structlog.get_logger().bind(
            connection=connection_name, connector=connector_name
        )
        self.stopping = asyncio.Event()  # set when the orchestrator asks the connector to stop
        self.identity = f"connection:{connection_name}"
        self._send = send
        self._ack_timeout_s = ack_timeout_s
        self._prefix = f"{connection_name}-{os.urandom(4).hex()}"  # unique across respawns
        self._counter = itertools.count(1)
        self._acks: dict[str, asyncio.Future[wire.EventAck]] = {}
        self._results: dict[str, asyncio.Future[wire.DelegateResult]] = {}
        self._cancels: dict[str, asyncio.Future[wire.Cancelled]] = {}

    async def emit(
        self,
        name: str | Mapping[str, Any],
        *,
        text: str | None = None,
        instance_key: str | None = None,
        properties: Mapping[str, object] | None = None,
        message: ConnectorMessage | Mapping[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> Ack:
        """Send an event; return once the orchestrator journaled it. Raises `EventRefused`,
        `EventNotAcknowledged` (no ack within 10 s), `ValueError`/`TypeError` for a bad event.
        `traceparent`: the caller's W3C trace context (an HTTP header), which the request's
        trace continues; without one (or a malformed one) the trace starts here."""
        event = build_event(
            name, text=text, instance_key=instance_key, properties=properties, message=message
        )
        ack, _ = await self._submit(event, traceparent)
        return ack

    async def start_request(
        self,
        name: str | Mapping[str, Any],
        *,
        text: str | None = None,
        instance_key: str | None = None,
        properties: Mapping[str, object] | None = None,
        message: ConnectorMessage | Mapping[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> PendingReply:
        """As `emit`, asking for the agent's answer: returns once accepted, with the reply to
        await later (so a poller can confirm the update first, then post the answer)."""
        event = build_event(
            name,
            text=text,
            instance_key=instance_key,
            properties=properties,
            message=message,
            reply=True,
        )
        ack, future = await self._submit(event, traceparent)
        assert future is not None
        return PendingReply(self, ack, future)

    async def request(
        self,
        name: str | Mapping[str, Any],
        *,
        text: str | None = None,
        instance_key: str | None = None,
        properties: Mapping[str, object] | None = None,
        message: ConnectorMessage | Mapping[str, Any] | None = None,
        timeout_s: float | None = DEFAULT_REPLY_TIMEOUT_S,
        traceparent: str | None = None,
    ) -> Reply:
        """Emit and wait for the agent's answer. Raises as `emit`, plus `ReplyFailed` (the
        turn ended in an error, with its code) and `ReplyTimeout`."""
        pending = await self.start_request(
            name,
            text=text,
            instance_key=instance_key,
            properties=properties,
            message=message,
            traceparent=traceparent,
        )
        return await pending.reply(timeout_s)

    async def cancel(self, trace_id: str, timeout_s: float = CANCEL_TIMEOUT_S) -> int:
        """Cancel the running turns of a trace that this connection's events started (the
        `traceId` of an `Ack` or `Reply`), down the delegation chain; return how many stopped
        (0 when the trace is finished, unknown, or another connection's). Raises
        `ConnectorError` when the orchestrator does not answer within `timeout_s`."""
        cid = f"{self._prefix}-{next(self._counter)}"
        future: asyncio.Future[wire.Cancelled] = asyncio.get_running_loop().create_future()
        self._cancels[cid] = future
        try:
            self._send(
                wire.encode(
                    wire.TRACE_CANCEL,
                    self.identity,
                    wire.ORCHESTRATOR,
                    wire.TraceCancel(trace_id),
                    correlation_id=cid,
                )
            )
            try:
                async with asyncio.timeout(timeout_s):  # as in `PendingReply.reply`
                    cancelled = await future
            except TimeoutError:
                raise ConnectorError(
                    f"the orchestrator did not answer a cancel within {timeout_s:g} s",
                    ErrorCode.E_TIMEOUT,
                ) from None
        finally:
            self._cancels.pop(cid, None)
        return len(cancelled.turns)

    async def sleep(self, seconds: float) -> bool:
        """Sleep, but wake when the connector is asked to stop: True if the time passed."""
        if self.stopping.is_set():
            return False
        try:
            async with asyncio.timeout(max(0.0, seconds)):  # as in `PendingReply.reply`
                await self.stopping.wait()
        except TimeoutError:
            return True
        return False

    async def unless_stopping(self, awaitable: Awaitable[T]) -> T | None:
        """Await `awaitable`, or cancel it and return None when the connector is asked to stop."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        return task.result() if not task.cancelled() else None

    # -- the process side --------------------------------------------------------------------

    async def _submit(
        self, event: wire.ConnectorEvent, traceparent: str | None = None
    ) -> tuple[Ack, asyncio.Future[wire.DelegateResult] | None]:
        cid = f"{self._prefix}-{next(self._counter)}"
        caller = parse_traceparent(traceparent)
        trace_id, parent_span = caller if caller is not None else (os.urandom(16).hex(), None)
        loop = asyncio.get_running_loop()
        ack_future: asyncio.Future[wire.EventAck] = loop.create_future()
        self._acks[cid] = ack_future
        result_future: asyncio.Future[wire.DelegateResult] | None = None
        if event.reply:  # registered now: an answer may follow the ack at once
            result_future = self._results[cid] = loop.create_future()
        accepted = False
        try:
            self._send(
                wire.encode(
                    wire.CONNECTOR_EVENT,
                    self.identity,
                    wire.ORCHESTRATOR,
                    event,
                    correlation_id=cid,
                    trace_id=trace_id,
                    span_id=parent_span,
                )
            )
            try:
                async with asyncio.timeout(self._ack_timeout_s):  # as in `PendingReply.reply`
                    ack = await ack_future
            except TimeoutError:
                raise EventNotAcknowledged(
                    f"the orchestrator did not acknowledge event '{event.name}' within "
                    f"{self._ack_timeout_s:g} s"
                ) from None
            if not ack.accepted:
                error = ack.error or wire.ErrorInfo(ErrorCode.E_EVENT_REFUSED, "refused")
                raise EventRefused(
                    f"the orchestrator refused event '{event.name}': {error.message}", error.code
                )
            accepted = True
        finally:
            self._acks.pop(cid, None)
            if not accepted:
                self._results.pop(cid, None)
        return Ack(cid, trace_id, ack.agent, ack.instance_key or event.instance_key), result_future

    def handle(self, env: wire.Envelope) -> bool:
        """Take an `event_ack`, `delegate_result` or `trace_cancelled` addressed to this
        context; False for any other type. Raises `wire.MalformedFrame` for a bad payload."""
        if env.type == wire.EVENT_ACK:
            ack = wire.decode_payload(env, wire.EventAck)
            future: asyncio.Future[Any] | None = self._acks.get(env.correlation_id or "")
            value: Any = ack
        elif env.type == wire.DELEGATE_RESULT:
            value = wire.decode_payload(env, wire.DelegateResult)
            future = self._results.get(env.correlation_id or "")
        elif env.type == wire.TRACE_CANCELLED:
            value = wire.decode_payload(env, wire.Cancelled)
            future = self._cancels.get(env.correlation_id or "")
        else:
            return False
        if future is None or future.done():
            self.logger.debug(
                "late answer dropped", type=env.type, correlationId=env.correlation_id
            )
        else:
            future.set_result(value)
        return True

    @property
    def in_flight(self) -> int:
        """Events waiting for their ack, plus requests waiting for their answer."""
        return len(self._acks) + len(self._results)


# -- secrets never reach the logs --------------------------------------------------------------


class SecretRedactor:
    """A structlog processor replacing every secret value in every logged field (the message,
    key/values, a formatted traceback, nested dicts and lists) with `[redacted]`."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._long: tuple[str, ...] = ()
        self._short: frozenset[str] = frozenset()
        self.update(values)

    def update(self, values: Iterable[str]) -> None:
        found = {v for v in values if isinstance(v, str) and v}
        variants = found | {quote(v, safe="") for v in found}  # as it appears in URLs
        self._long = tuple(
            sorted(
                {*self._long, *(v for v in variants if len(v) >= MIN_SUBSTRING_SECRET)},
                key=len,
                reverse=True,
            )
        )
        self._short = self._short | {v for v in variants if len(v) < MIN_SUBSTRING_SECRET}

    def redact(self, text: str) -> str:
        if text in self._short:
            return REDACTED
        for secret in self._long:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def clean(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, Mapping):
            return {k: self.clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.clean(v) for v in value]
        if isinstance(value, BaseException):  # exc_info=exc: render it here, redacted
            return self.redact(f"{type(value).__name__}: {value}")
        text = str(value)  # URLs, paths, anything a renderer would str()/repr()
        cleaned = self.redact(text)
        return cleaned if cleaned != text else value

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        return {key: self.clean(value) for key, value in event_dict.items()}


class _ToStructlog(logging.Handler):
    """Routes stdlib logging (aiohttp, httpx, asyncio) through structlog, hence the redactor."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = {"logger": record.name}
            if record.exc_info:
                fields["exc_info"] = record.exc_info
            structlog.get_logger().log(record.levelno, record.getMessage(), **fields)
        except Exception:  # a logging failure must never take the connector down
            self.handleError(record)


def install_redaction(redactor: SecretRedactor, *, stdlib_level: int = logging.WARNING) -> None:
    """Put `redactor` before the renderer of the current structlog configuration (call after
    `configure_logging`), and send stdlib logging through structlog too."""
    processors = list(structlog.get_config()["processors"])
    if redactor not in processors:
        processors.insert(max(0, len(processors) - 1), redactor)
    structlog.configure(processors=processors)
    logging.basicConfig(handlers=[_ToStructlog()], level=stdlib_level, force=True)


# -- loading a Connection ----------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionSetup:
    connection: str
    connector: str  # the Connector resource's name
    entry: Path
    config: dict[str, str]
    secrets: dict[str, str]
    module_name: str


def load_connection(bundle_path: str | Path, name: str, env: Mapping[str, str]) -> ConnectionSetup:
    """Find Connection `name` and its Connector, and resolve its config and secrets from `env`.
    Raises `ConnectorConfigError` with a message a user can act on (never a secret's value)."""
    from goondan.bundle import BundleInvalid, load_bundle, resolve_value
    from goondan.bundle.model import LOCAL_SCOPE, ConnectionSpec
    from goondan.bundle.values import describe_source

    try:
        bundle = load_bundle(bundle_path)
    except BundleInvalid as exc:
        raise ConnectorConfigError(f"the bundle no longer validates:\n{exc}") from None
    connections = bundle.of_kind("Connection")
    matches = [c for c in connections if c.name == name]
    matches.sort(key=lambda c: c.package != LOCAL_SCOPE)  # the bundle's own first
    if not matches:
        known = ", ".join(c.name for c in connections) or "none"
        raise ConnectorConfigError(
            f"no Connection named '{name}' in {bundle.root} (connections: {known})"
        )
    connection = matches[0]
    spec: ConnectionSpec = connection.spec
    connector = bundle.find(spec.connector_ref, connection.package)
    if connector is None:
        raise ConnectorConfigError(f"{connection.label}: {spec.connector_ref} not found")
    resolved: dict[str, dict[str, str]] = {"config": {}, "secrets": {}}
    missing: list[str] = []
    for section, sources in (("config", spec.config), ("secrets", spec.secrets)):
        for key, source in sources.items():
            value = resolve_value(source, env)
            if value is None:
                missing.append(f"{section}.{key} (from {describe_source(source)})")
            else:
                resolved[section][key] = value
    if missing:
        raise ConnectorConfigError(
            f"{connection.label}: {len(missing)} value(s) not set: {'; '.join(missing)}. "
            "Set them in the environment of `goondan run` (or its systemd EnvironmentFile)"
        )
    safe = "".join(ch if ch.isalnum() else "_" for ch in f"{connector.package}__{connector.name}")
    return ConnectionSetup(
        connection=connection.name,
        connector=connector.name,
        entry=connector.entry_path(),
        config=resolved["config"],
        secrets=resolved["secrets"],
        module_name=f"goondan_connector__{safe}",
    )


def import_main(setup: ConnectionSetup) -> ConnectorMain:
    """Import the connector's entry file and return its `async def main(ctx)`."""
    path = setup.entry
    label = f"Connector/{setup.connector}"
    spec = importlib.util.spec_from_file_location(setup.module_name, path)
    if spec is None or spec.loader is None:
        raise ConnectorConfigError(f"{label}: cannot import {path} (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[setup.module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[setup.module_name]
        raise ConnectorConfigError(
            f"{label}: importing {path} failed: {type(exc).__name__}: {exc}"
        ) from None
    main = getattr(module, "main", None)
    if main is None or not inspect.iscoroutinefunction(main):
        raise ConnectorConfigError(
            f"{label}: {path} must define `async def main(ctx)` (the connector's entry)"
        )
    entry: ConnectorMain = main
    return entry
