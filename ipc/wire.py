"""The wire: one MessagePack-encoded envelope per ZeroMQ frame.

The envelope carries the routing header; `payload` stays `msgspec.Raw` so the broker can route a
message without decoding (or re-encoding) its body. Field names are camelCase on the wire.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Final, Literal, NamedTuple, TypeVar

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
CONTROL: Final = "control"  # a command: CLI or agent -> orchestrator, orchestrator -> agent
CONTROL_REPLY: Final = "control_reply"
APPROVAL_REQUEST: Final = "approval_request"  # agent -> orchestrator: a call waits for a human
APPROVAL_DECISION: Final = "approval_decision"  # orchestrator -> agent: approved, denied...
TRACE_CANCEL: Final = "trace_cancel"  # connector -> orchestrator: cancel a trace it started
TRACE_CANCELLED: Final = "trace_cancelled"  # orchestrator -> connector: what that stopped

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


class Heartbeat(msgspec.Struct, frozen=True, omit_defaults=True):
    """A sign of life. An agent adds its cumulative counts since it started (for `goondan run
    --metrics`) when they changed; a bare heartbeat is an empty map, as `Empty` is."""

    pid: int = 0
    model: str = ""
    llm: dict[str, int] = {}  # outcome -> model calls
    tokens: dict[str, int] = {}  # direction -> tokens
    tools: list[tuple[str, str, int]] = []  # (tool, outcome, calls)


class RestartRequest(msgspec.Struct, frozen=True):
    reason: str


class Empty(msgspec.Struct, frozen=True):
    pass


class ApprovalRequest(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """A tool call that waits for `goondan approve` / `deny`. The id is derived from the
    agent, instance and tool call, so asking again (after a restart) finds the same entry."""

    id: str
    instance_key: str
    tool: str
    args: str  # the call's JSON arguments
    tool_call_id: str
    timeout_s: float
    trace_id: str = ""
    withdrawn: bool = False  # the call stopped waiting (its turn was cancelled or timed out)


class ApprovalDecision(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """What became of an `ApprovalRequest`; who decided, and when (time.time())."""

    id: str
    decision: Literal["approved", "denied", "expired"]
    reason: str = ""
    decided_by: str = ""
    decided_at: float = 0.0


# -- control commands -----------------------------------------------------------------------
# A `control` payload is `{command, args}`. `args` stays `msgspec.Raw` in the envelope, so any
# receiver can read the command name first and then decode the args with that command's Struct
# (`decode_args`); an unknown command or bad args are answered with an error, never a crash.

NO_ARGS: Final = msgspec.Raw(b"\x80")  # an empty map; omitted on the wire (compared by identity)


class Control(msgspec.Struct, frozen=True, omit_defaults=True):
    command: str
    args: msgspec.Raw = NO_ARGS


class StatusArgs(msgspec.Struct, frozen=True, omit_defaults=True):
    """`status` (CLI -> orchestrator): the daemon's pid, swarm and process table."""


class StopArgs(msgspec.Struct, frozen=True, omit_defaults=True):
    """`stop` (CLI -> orchestrator): stop the daemon and its processes."""


class RestartArgs(msgspec.Struct, frozen=True, omit_defaults=True):
    """`restart` (CLI -> orchestrator): reload the bundle, or restart one agent."""

    agent: str | None = None
    fresh: bool = False  # with `agent`: delete its conversations too


class InstanceDeleteArgs(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """`instance.delete` (CLI -> orchestrator): delete an instance while the daemon runs."""

    instance_key: str
    swarm: str | None = None
    workdir: bool = False


class SpawnArgs(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """`spawn` (agent -> orchestrator, `agents__spawn`): prepare an instance of `target`."""

    target: str
    instance_key: str | None = None
    owner: str = ""  # the caller's instance key
    cwd: str | None = None  # the instance's working directory (absolute), instead of its own


class ListArgs(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """`list` (agent -> orchestrator, `agents__list`): the instances the caller spawned."""

    include_all: bool = False
    owner: str = ""


class InstanceDropArgs(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """`instance.drop` (orchestrator -> agent): forget an instance and remove its files."""

    instance_key: Annotated[str, msgspec.Meta(min_length=1)]


class CancelArgs(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """`cancel` (CLI -> orchestrator): cancel the running turns that match every filter given
    (`all`: every running turn), and the delegations they wait on, down the chain."""

    agent: str | None = None
    instance_key: str | None = None
    trace_id: str | None = None
    all: bool = False


class TurnCancelArgs(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """`turn.cancel` (orchestrator -> agent): cancel the running or queued turns matching every
    filter given (`requestId`: the one request the orchestrator forwarded under that id)."""

    instance_key: str | None = None
    trace_id: str | None = None
    request_id: str | None = None


class TraceCancel(msgspec.Struct, frozen=True, rename="camel"):
    """`trace_cancel` (connector -> orchestrator): cancel the turns of a trace that this
    connection's own events started (a webhook caller cancelling its request)."""

    trace_id: str


class LogsFlushArgs(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """`logs.flush` (CLI -> orchestrator): have every running agent write the runtime events
    it holds (`events.flush`), waiting `wait_ms` for each, so that `goondan logs` then reads
    every event of a turn that has answered. `agents`: only these (`logs --agent`); every
    running agent when empty."""

    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 2_000
    agents: list[str] = []


class EventsFlushArgs(msgspec.Struct, frozen=True, omit_defaults=True):
    """`events.flush` (orchestrator -> agent): write the runtime events held in a batch now."""


class ApprovalsArgs(msgspec.Struct, frozen=True, omit_defaults=True):
    """`approvals` (CLI -> orchestrator): the tool calls waiting for a human."""


class DecideArgs(msgspec.Struct, frozen=True, omit_defaults=True):
    """`approve` / `deny` (CLI -> orchestrator): decide a waiting call. `by` names the
    deciding user (the CLI's OS user and uid)."""

    id: str
    reason: str = ""
    by: str = ""


ControlArgs = (
    StatusArgs
    | StopArgs
    | RestartArgs
    | InstanceDeleteArgs
    | SpawnArgs
    | ListArgs
    | InstanceDropArgs
    | CancelArgs
    | TurnCancelArgs
    | LogsFlushArgs
    | EventsFlushArgs
    | ApprovalsArgs
    | DecideArgs
)


class ControlReply(msgspec.Struct, frozen=True, omit_defaults=True):
    ok: bool
    # The command's result Struct (`Status`, `Dropped`...) when sent; plain data when decoded,
    # which `decode_result` turns back into that Struct (a CLI prints it as JSON as it came).
    result: Any = None
    error: ErrorInfo | None = None


class Spawned(msgspec.Struct, frozen=True, rename="camel"):
    """The result of `spawn`."""

    target: str
    instance_key: str
    spawned: bool = True
    cwd: str | msgspec.UnsetType = msgspec.UNSET  # only when `spawn` named one


class Dropped(msgspec.Struct, frozen=True):
    """The result of `instance.drop`: whether the agent had the instance."""

    dropped: bool


class SpawnedInstance(msgspec.Struct, frozen=True, rename="camel"):
    """An instance an agent spawned (`agents__spawn`), as `list` shows it."""

    target: str
    instance_key: str
    owner_agent: str
    owner_instance_key: str
    created_at: float
    cwd: str | msgspec.UnsetType = msgspec.UNSET


class Listed(msgspec.Struct, frozen=True):
    """The result of `list`."""

    count: int
    agents: list[SpawnedInstance]


class LastExit(msgspec.Struct, frozen=True, omit_defaults=True):
    """Why a process last stopped: its exit code or the signal that ended it, the error it
    reported (or what the daemon saw: a hang, a failed launch), and when (time.time())."""

    at: float
    code: int | None = None
    signal: str | None = None
    error: str | None = None


class ProcessInfo(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """One row of `goondan status` (`notStarted`: never ran, or could not start)."""

    name: str
    kind: str
    pid: int | None
    status: str
    restarts: int
    last_exit: LastExit | None = None
    node: str | None = None  # a Ray-placed agent's node (`run --placement ray`)


class Status(msgspec.Struct, frozen=True, rename="camel"):
    """The result of `status`."""

    pid: int
    swarm: str
    bundle: str
    entry_agent: str
    started_at: float  # time.time()
    state_root: str
    processes: list[ProcessInfo]


class Reloaded(msgspec.Struct, frozen=True, omit_defaults=True):
    """The result of `restart` without an agent: the bundle read again, and what changed.
    A refused reload carries its `errors` (the command answers them as `E_CONFIG`)."""

    reloaded: bool
    restarted: list[str]
    added: list[str]
    removed: list[str]
    errors: list[str] = []


class Restarted(msgspec.Struct, frozen=True):
    """The result of `restart --agent`."""

    restarted: list[str]
    fresh: bool


class Stopping(msgspec.Struct, frozen=True):
    """The result of `stop`."""

    stopping: bool = True


class Deleted(msgspec.Struct, frozen=True):
    """The result of `instance.delete`: `swarm/instance` directories removed."""

    deleted: list[str]


class CancelledTurn(msgspec.Struct, frozen=True, rename="camel"):
    """A turn a cancel stopped (or a queued request it removed)."""

    agent: str
    instance_key: str
    trace_id: str
    request_id: str


class Cancelled(msgspec.Struct, frozen=True):
    """The result of `cancel` (every agent's turns) and `turn.cancel` (the agent's)."""

    turns: list[CancelledTurn]


class Flushed(msgspec.Struct, frozen=True):
    """The result of `logs.flush` and `events.flush`: the agents whose held runtime events are
    now in their files."""

    agents: list[str]


class ApprovalInfo(msgspec.Struct, frozen=True, rename="camel"):
    """One waiting call, as `goondan approvals` shows it."""

    id: str
    agent: str
    instance_key: str
    tool: str
    args: Any  # the call's arguments (decoded JSON; the raw text when it is not JSON)
    created_at: float  # time.time()
    expires_at: float


class Approvals(msgspec.Struct, frozen=True):
    """The result of `approvals`."""

    approvals: list[ApprovalInfo]


class Decided(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """The result of `approve` / `deny`."""

    id: str
    decision: str
    decided_by: str
    decided_at: float
    reason: str = ""


ControlResult = (
    Status
    | Stopping
    | Reloaded
    | Restarted
    | Deleted
    | Spawned
    | Listed
    | Dropped
    | Approvals
    | Decided
    | Cancelled
    | Flushed
)


class Command(NamedTuple):
    """A control command's declared types: the args it takes, and what an ok reply carries."""

    args: type[ControlArgs]
    result: type[ControlResult] | types.UnionType  # a result Struct, or a union of them


CLI_COMMANDS: Final[dict[str, Command]] = {
    "status": Command(StatusArgs, Status),
    "stop": Command(StopArgs, Stopping),
    "restart": Command(RestartArgs, Reloaded | Restarted),  # (no agent) | (--agent)
    "instance.delete": Command(InstanceDeleteArgs, Deleted),
    "cancel": Command(CancelArgs, Cancelled),
    "logs.flush": Command(LogsFlushArgs, Flushed),
    "approvals": Command(ApprovalsArgs, Approvals),
    "approve": Command(DecideArgs, Decided),
    "deny": Command(DecideArgs, Decided),
}
"""The commands of control.sock (`goondan status/stop/restart/instance delete/cancel/logs`)."""
AGENT_COMMANDS: Final[dict[str, Command]] = {
    "spawn": Command(SpawnArgs, Spawned),
    "list": Command(ListArgs, Listed),
}
"""What an agent process may ask the orchestrator itself (on agents.sock)."""
DAEMON_COMMANDS: Final[dict[str, Command]] = {
    "instance.drop": Command(InstanceDropArgs, Dropped),
    "turn.cancel": Command(TurnCancelArgs, Cancelled),
    "events.flush": Command(EventsFlushArgs, Flushed),
}
"""What the orchestrator asks an agent process (`AgentCalls`)."""


# -- message types ------------------------------------------------------------------------

Kind = Literal["agent", "connector"]
MessageTag = Literal[
    "delegate",
    "delegate_result",
    "event",
    "shutdown",
    "shutdown_ack",
    "ready",
    "start_error",
    "heartbeat",
    "restart_request",
    "connector_event",
    "event_ack",
    "turn_update",
    "control",
    "control_reply",
    "approval_request",
    "approval_decision",
    "trace_cancel",
    "trace_cancelled",
]


class MessageType(NamedTuple):
    """One message type on agents.sock: its tag, its payload, and which kinds of process send
    it to the orchestrator (`sent_by`) or receive it from there (`received_by`). Each receiver
    builds its `{type: handler}` table for these, and the orchestrator drops a type a kind does
    not send."""

    tag: MessageTag
    payload: type[msgspec.Struct]
    sent_by: frozenset[Kind] = frozenset()
    received_by: frozenset[Kind] = frozenset()


_AGENT: Final[frozenset[Kind]] = frozenset({"agent"})
_CONNECTOR: Final[frozenset[Kind]] = frozenset({"connector"})
_BOTH: Final[frozenset[Kind]] = frozenset({"agent", "connector"})

MESSAGES: Final[dict[str, MessageType]] = {
    m.tag: m
    for m in (
        MessageType(DELEGATE, Delegate, sent_by=_AGENT, received_by=_AGENT),
        MessageType(DELEGATE_RESULT, DelegateResult, sent_by=_AGENT, received_by=_BOTH),
        MessageType(EVENT, Event, sent_by=_AGENT, received_by=_AGENT),
        MessageType(SHUTDOWN, Shutdown, received_by=_BOTH),
        MessageType(SHUTDOWN_ACK, Empty, sent_by=_BOTH),
        MessageType(READY, Ready, sent_by=_BOTH),
        MessageType(START_ERROR, ErrorInfo, sent_by=_BOTH),
        MessageType(HEARTBEAT, Heartbeat, sent_by=_BOTH),
        MessageType(RESTART_REQUEST, RestartRequest, sent_by=_AGENT),
        MessageType(CONNECTOR_EVENT, ConnectorEvent, sent_by=_CONNECTOR),
        MessageType(EVENT_ACK, EventAck, received_by=_CONNECTOR),
        MessageType(TURN_UPDATE, TurnUpdate, sent_by=_AGENT),
        MessageType(CONTROL, Control, sent_by=_AGENT, received_by=_AGENT),
        MessageType(CONTROL_REPLY, ControlReply, sent_by=_AGENT, received_by=_AGENT),
        MessageType(APPROVAL_REQUEST, ApprovalRequest, sent_by=_AGENT),
        MessageType(APPROVAL_DECISION, ApprovalDecision, received_by=_AGENT),
        MessageType(TRACE_CANCEL, TraceCancel, sent_by=_CONNECTOR),
        MessageType(TRACE_CANCELLED, Cancelled, received_by=_CONNECTOR),
    )
}
"""Every message type of agents.sock (control.sock carries `delegate` and `control` from a
CLI, answered by `delegate_result`, `turn_update` and `control_reply`)."""


def sent_by(kind: Kind) -> frozenset[str]:
    """The types a kind of process sends to the orchestrator."""
    return frozenset(tag for tag, m in MESSAGES.items() if kind in m.sent_by)


def received_by(kind: Kind) -> frozenset[str]:
    """The types a kind of process receives from the orchestrator."""
    return frozenset(tag for tag, m in MESSAGES.items() if kind in m.received_by)


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


class BadArgs(ValueError):
    """A control command's args that its Struct does not accept; answered with E_BAD_REQUEST."""


def control(command: str, args: msgspec.Struct | None = None) -> Control:
    """The `control` payload for `command`; empty args are left out, as they always were."""
    if args is None:
        return Control(command)
    raw = _encoder.encode(args)
    return Control(command, NO_ARGS if raw == b"\x80" else msgspec.Raw(raw))


def _decoder(type_: type[P]) -> msgspec.msgpack.Decoder[P]:
    """One decoder per payload type, made on first use."""
    decoder = _payload_decoders.get(type_)
    if decoder is None:
        decoder = _payload_decoders[type_] = msgspec.msgpack.Decoder(type_)
    return decoder


def decode_result(reply: ControlReply, type_: type[P]) -> P:
    """An ok reply's result as `type_` (its command's declared result). Raises
    `MalformedFrame`."""
    try:
        return msgspec.convert(reply.result, type_)
    except msgspec.ValidationError as exc:
        raise MalformedFrame(f"bad {type_.__name__} result: {exc}") from None


def decode_args(command: Control, type_: type[P]) -> P:
    """The command's args as `type_`. Raises `BadArgs` naming the command and the field."""
    try:
        result: P = _decoder(type_).decode(command.args)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadArgs(f"bad args for command '{command.command}': {exc}") from None
    return result


def decode_payload(envelope: Envelope, type_: type[P]) -> P:
    """Decode the payload as `type_`. Raises `MalformedFrame`."""
    try:
        result: P = _decoder(type_).decode(envelope.payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MalformedFrame(
            f"bad {envelope.type} payload from {envelope.from_!r}: {exc}"
        ) from None
    return result
