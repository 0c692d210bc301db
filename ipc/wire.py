"""The wire: one MessagePack-encoded envelope per ZeroMQ frame.

The envelope carries the routing header; `payload` stays `msgspec.Raw` so the broker can route a
message without decoding (or re-encoding) its body. Field names are camelCase on the wire.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

PROTOCOL_VERSION: Final = 1

# A request's time limit: a negative or zero one would expire before it is delivered.
TimeoutMs = Annotated[int, msgspec.Meta(gt=0)]

# Core message types (DESIGN.md "IPC") and the lifecycle types the supervisor needs.
DELEGATE: Final = "delegate"  # request that expects exactly one delegate_result
DELEGATE_RESULT: Final = "delegate_result"
EVENT: Final = "event"  # fire and forget
SHUTDOWN: Final = "shutdown"
SHUTDOWN_ACK: Final = "shutdown_ack"
READY: Final = "ready"
START_ERROR: Final = "start_error"  # the agent could not start (bad tool module, bad model...)
HEARTBEAT: Final = "heartbeat"
RESTART_REQUEST: Final = "restart_request"  # an agent asks for a swarm restart (self-restart)
CONNECTOR_EVENT: Final = "connector_event"  # a connector process -> orchestrator
EVENT_ACK: Final = "event_ack"  # orchestrator -> connector: journaled (or refused), same id
TURN_UPDATE: Final = "turn_update"  # agent -> requester, while a turn runs (same correlationId)
CONTROL: Final = "control"  # CLI -> orchestrator command
CONTROL_REPLY: Final = "control_reply"

ORCHESTRATOR: Final = "orchestrator"  # the `to`/`from` name of the broker itself


class Envelope(msgspec.Struct, omit_defaults=True, rename="camel"):
    type: str
    from_: str = msgspec.field(name="from")
    to: str = ""
    payload: msgspec.Raw = msgspec.Raw(b"\x80")  # an empty map
    correlation_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None


class Source(msgspec.Struct, frozen=True, omit_defaults=True):
    kind: Literal["agent", "cli", "connector", "orchestrator"]
    name: str


class ErrorInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    code: str
    message: str
    suggestion: str | None = None


class Ready(msgspec.Struct, frozen=True, rename="camel"):
    protocol_version: int
    pid: int
    agent: str


class Delegate(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """A request for one turn of the target agent.

    The orchestrator forwards it under its own `correlationId`, which stays the same when it
    delivers the request again (after a crash, or from the journal after a restart): the agent
    uses it as the request id to tell a replay from a new request."""

    input: str
    instance_key: str
    source: Source
    call_chain: tuple[str, ...] = ()  # agent names the request passed through, oldest first
    timeout_ms: TimeoutMs | None = None
    metadata: dict[str, Any] = {}


class DelegateRouting(msgspec.Struct, frozen=True, rename="camel"):
    """The part of a `Delegate` payload the broker reads; the rest stays undecoded."""

    call_chain: tuple[str, ...] = ()
    timeout_ms: TimeoutMs | None = None


class DelegateResult(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    status: Literal["ok", "error"]
    target: str
    response: str | None = None
    error: ErrorInfo | None = None
    instance_key: str | None = None


class Event(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    input: str
    instance_key: str
    source: Source
    metadata: dict[str, Any] = {}


class Shutdown(msgspec.Struct, frozen=True, rename="camel"):
    reason: str  # "orchestrator_shutdown" | "restart" | "config_change"
    grace_period_ms: int


class ConnectorMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a connector received: text, or an image/file by URL (upstream's three forms)."""

    type: Literal["text", "image", "file"] = "text"
    text: str | None = None
    url: str | None = None
    name: str | None = None


class ConnectorEvent(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """An event a connector emits. The orchestrator applies the Connection's ingress rules and
    runs one turn for it. With `reply`, the agent's answer comes back as a `delegate_result`
    carrying the event's correlationId (after the `event_ack`)."""

    name: str
    message: ConnectorMessage
    instance_key: str
    properties: dict[str, str] = {}
    reply: bool = False


class EventAck(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """The orchestrator has journaled the event (`accepted`) and routed it, or refused it."""

    accepted: bool
    agent: str | None = None
    instance_key: str | None = None
    error: ErrorInfo | None = None


class TurnUpdate(msgspec.Struct, frozen=True, omit_defaults=True):
    """Something a running turn shows its requester before the answer: streamed model text
    (`text`), or a tool's `ctx.update(...)` (`progress`, with toolName/message/progress)."""

    kind: Literal["text", "progress"]
    text: str | None = None
    data: dict[str, Any] = {}


class RestartRequest(msgspec.Struct, frozen=True):
    reason: str


class Empty(msgspec.Struct, frozen=True):
    pass


class Control(msgspec.Struct, frozen=True, omit_defaults=True):
    command: str  # "send" | "status" | "stop"
    args: dict[str, Any] = {}


class ControlReply(msgspec.Struct, frozen=True, omit_defaults=True):
    ok: bool
    result: Any = None
    error: ErrorInfo | None = None


P = TypeVar("P")

_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_payload_decoders: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


class MalformedFrame(ValueError):
    """A frame that is not a valid envelope or payload; receivers log it and drop it."""


def encode_payload(payload: msgspec.Struct) -> msgspec.Raw:
    return msgspec.Raw(_encoder.encode(payload))


def encode(
    type_: str,
    from_: str,
    to: str,
    payload: msgspec.Struct | msgspec.Raw | None = None,
    *,
    correlation_id: str | None = None,
    trace_id: str | None = None,
    span_id: str | None = None,
    parent_span_id: str | None = None,
) -> bytes:
    raw = payload if isinstance(payload, msgspec.Raw) else encode_payload(payload or Empty())
    return _encoder.encode(
        Envelope(type_, from_, to, raw, correlation_id, trace_id, span_id, parent_span_id)
    )


def encode_envelope(envelope: Envelope) -> bytes:
    return _encoder.encode(envelope)


def decode(frame: bytes) -> Envelope:
    """Decode the routing header only. Raises `MalformedFrame`."""
    try:
        return _envelope_decoder.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MalformedFrame(f"bad envelope: {exc}") from None


def decode_payload(envelope: Envelope, type_: type[P]) -> P:
    """Decode the payload as `type_`. Raises `MalformedFrame`."""
    decoder = _payload_decoders.get(type_)
    if decoder is None:
        decoder = _payload_decoders[type_] = msgspec.msgpack.Decoder(type_)
    try:
        result: P = decoder.decode(envelope.payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MalformedFrame(
            f"bad {envelope.type} payload from {envelope.from_!r}: {exc}"
        ) from None
    return result
