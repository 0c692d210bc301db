"""ZMTP 3.1, ZeroMQ's wire protocol (rfc.zeromq.org/spec/37), as far as a DEALER and a ROUTER
need it.

The greeting, the NULL mechanism's READY handshake, message and command frames, and the PING
a peer may send. `Reader` turns the bytes of a connection into messages and commands; the
module-level functions build what we send. Nothing here does I/O: `ipc.dealer` and
`ipc.router_socket` do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# signature (0xFF, 8 bytes of padding, 0x7F), version 3.1, mechanism NULL, as-server 0, filler
GREETING = b"\xff" + bytes(8) + b"\x7f" + bytes((3, 1)) + b"NULL".ljust(20, b"\0") + bytes(32)
GREETING_SIZE = 64

_MORE = 0x01
_LONG = 0x02
_COMMAND = 0x04

# The largest message a DEALER of ours sends, and that the orchestrator routes (a request over
# it is answered with an error). A reader takes a little more: routing rewrites the envelope.
# libzmq's default is no limit; here a peer declaring a length of exabytes (a bug, or bytes that
# are not ZMTP) would make the reader buffer until memory ran out.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_READ_BYTES = MAX_MESSAGE_BYTES + 64 * 1024
# What a frame held in memory costs beyond its bytes (a bytes object's header in a 16-byte
# pymalloc block, and its slot in the message's list), counted against the limits: else a
# message of 1-byte frames would take 13 times its size in memory.
FRAME_OVERHEAD = 48


class ProtocolError(Exception):
    """The peer broke ZMTP: the connection cannot go on."""


class MessageTooLarge(ValueError):
    """A message over the size limit: refused before it is sent, as its reader would drop the
    connection (and every message behind it) on reading its length."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a message of {size:,} bytes is over the {limit:,}-byte limit")
        self.size = size
        self.limit = limit


def check_size(data: bytes, limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """`data`, an encoded message, if it is within `limit`; else MessageTooLarge."""
    if len(data) > limit:
        raise MessageTooLarge(len(data), limit)
    return data


def message(frames: Sequence[bytes]) -> bytes:
    """One message (one or more frames) as it goes on the wire."""
    if len(frames) == 1:  # the common case, without the loop
        frame = frames[0]
        size = len(frame)
        if size < 256:
            return bytes((0, size)) + frame
        return b"\x02" + size.to_bytes(8, "big") + frame
    parts: list[bytes] = []
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        more = _MORE if i < last else 0
        size = len(frame)
        if size < 256:
            parts.append(bytes((more, size)))
        else:
            parts.append(bytes((more | _LONG,)) + size.to_bytes(8, "big"))
        parts.append(frame)
    return b"".join(parts)


def command(name: bytes, data: bytes = b"") -> bytes:
    body = bytes((len(name),)) + name + data
    if len(body) < 256:
        return bytes((_COMMAND, len(body))) + body
    return bytes((_COMMAND | _LONG,)) + len(body).to_bytes(8, "big") + body


def ready(
    socket_type: bytes,
    identity: bytes | None = None,
    extra: dict[bytes, bytes] | None = None,
) -> bytes:
    """The NULL mechanism's READY: our socket type, the identity a ROUTER routes by, and any
    `extra` properties (ZMTP lets a peer add its own, by convention named `X-...`)."""
    metadata = _property(b"Socket-Type", socket_type)
    if identity is not None:
        metadata += _property(b"Identity", identity)
    for name, value in (extra or {}).items():
        metadata += _property(name, value)
    return command(b"READY", metadata)


def error(reason: str) -> bytes:
    """The ERROR command: why we end the connection (at most 255 bytes of it)."""
    text = reason.encode()[:255]
    return command(b"ERROR", bytes((len(text),)) + text)


def pong(ping_data: bytes) -> bytes:
    """The answer to a PING: its context, after the 2-byte TTL (at most 16 bytes of it, as
    ZMTP says, so a large PING does not cost us a large answer)."""
    return command(b"PONG", ping_data[2:18])


def properties(data: bytes) -> dict[bytes, bytes]:
    """The metadata of a READY command."""
    found: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(data):
        name_end = pos + 1 + data[pos]
        if name_end + 4 > len(data):
            raise ProtocolError("truncated property in READY")
        value_end = name_end + 4 + int.from_bytes(data[name_end : name_end + 4], "big")
        if value_end > len(data):
            raise ProtocolError("truncated property value in READY")
        found[data[pos + 1 : name_end]] = data[name_end + 4 : value_end]
        pos = value_end
    return found


def _property(name: bytes, value: bytes) -> bytes:
    return bytes((len(name),)) + name + len(value).to_bytes(4, "big") + value


def refusal(error_data: bytes) -> ProtocolError:
    """What a peer's ERROR command says, as the error that ends the connection."""
    reason = error_data[1 : 1 + error_data[0]].decode(errors="replace") if error_data else ""
    return ProtocolError(f"the peer refused us: {reason}")


def check_greeting(greeting: bytes) -> None:
    if greeting[0] != 0xFF or not greeting[9] & 0x01:
        raise ProtocolError("the peer does not speak ZMTP (bad signature)")
    if greeting[10] < 3:
        raise ProtocolError(f"the peer speaks ZMTP {greeting[10]}.x; 3.x is needed")
    mechanism = greeting[12:32].rstrip(b"\0")
    if mechanism != b"NULL":
        raise ProtocolError(f"the peer wants the {mechanism.decode(errors='replace')} mechanism")


class Reader:
    """Incremental parser: `feed` the bytes as they come; it calls `on_message(frames)` for each
    complete message and `on_command(name, data)` for each command, in order. A frame, or a
    message of several, over `max_bytes` is a ProtocolError as soon as its length is read (each
    frame of a message counted with FRAME_OVERHEAD)."""

    def __init__(
        self,
        on_message: Callable[[list[bytes]], None],
        on_command: Callable[[bytes, bytes], None],
        max_bytes: int = MAX_READ_BYTES,
    ) -> None:
        self._on_message = on_message
        self._on_command = on_command
        self._max_bytes = max_bytes
        # The bytes of an incomplete greeting or frame, and how many make it whole: a large
        # message arriving in many reads is gathered once, not re-joined on every read.
        self._partial = bytearray()
        self._wanted = GREETING_SIZE
        self._greeted = False
        self._parts: list[bytes] = []
        self._parts_bytes = 0  # the frames of `_parts` together, with their overhead

    @property
    def buffered(self) -> int:
        """Bytes held for a message not yet complete (0 between messages)."""
        return len(self._partial) + self._parts_bytes

    def feed(self, data: bytes) -> None:
        if self._partial:
            self._partial += data
            if len(self._partial) < self._wanted:
                return
            data = bytes(self._partial)
            self._partial = bytearray()
        pos = 0
        end = len(data)
        if not self._greeted:
            if end < GREETING_SIZE:
                self._keep(data, 0, GREETING_SIZE)
                return
            check_greeting(data[:GREETING_SIZE])
            self._greeted = True
            pos = GREETING_SIZE
        while pos < end:
            if end - pos < 2:
                self._keep(data, pos, 2)
                return
            flags = data[pos]
            if flags & _LONG:
                if end - pos < 9:
                    self._keep(data, pos, 9)
                    return
                start = pos + 9
                stop = start + int.from_bytes(data[pos + 1 : start], "big")
            else:
                start = pos + 2
                stop = start + data[pos + 1]
            size = stop - start + self._parts_bytes  # with the message's earlier frames
            if size > self._max_bytes:
                raise ProtocolError(
                    f"a message of {size:,} bytes or more is over the "
                    f"{self._max_bytes:,}-byte limit"
                )
            if stop > end:
                self._keep(data, pos, stop - pos)
                return
            body = data[start:stop]
            pos = stop
            if flags & _COMMAND:
                if flags & _MORE or not body or 1 + body[0] > len(body):
                    raise ProtocolError("malformed command frame")
                self._on_command(body[1 : 1 + body[0]], body[1 + body[0] :])
            elif flags & _MORE:
                self._parts.append(body)
                self._parts_bytes += len(body) + FRAME_OVERHEAD
            elif self._parts:
                parts = self._parts
                parts.append(body)
                self._parts = []
                self._parts_bytes = 0
                self._on_message(parts)
            else:
                self._on_message([body])

    def _keep(self, data: bytes, pos: int, wanted: int) -> None:
        """Hold the incomplete rest, from `pos`, until `wanted` bytes of it are here."""
        self._partial = bytearray(memoryview(data)[pos:])
        self._wanted = wanted
