"""A ZeroMQ DEALER that speaks ZMTP itself, from the event loop, over an `ipc://` endpoint.

An agent talks only to the orchestrator's ROUTER. With libzmq, every message in or out crosses
two threads of the agent (libzmq's I/O thread, then a wake-up of the loop's), and each of those
is a wake-up and cold caches when 200 agents share 2 cores. Here the loop reads and writes the
unix socket itself: one wake-up per message. The ROUTER sees an ordinary ZMTP 3.1 DEALER with
the NULL mechanism and our identity, so ROUTER_MANDATORY and ROUTER_HANDOVER work as before.

Like libzmq's DEALER it reconnects (every RECONNECT_S) when the connection is lost, and holds
what is sent meanwhile, in order, until the next handshake is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from ipc import tls, zmtp
from ipc.tasks import TaskSet

Frames = list[bytes]
RECONNECT_S = 0.1  # libzmq's ZMQ_RECONNECT_IVL default


class Dealer:
    """Sends and receives whole messages (lists of frames) for one identity.

    `on_frames` is called synchronously for every received message; it must not block.
    `on_disconnect(reason)` is told when a connection is lost (the Dealer reconnects itself).
    """

    def __init__(
        self,
        endpoint: str,
        identity: str,
        on_frames: Callable[[Frames], None],
        *,
        on_disconnect: Callable[[str], None] | None = None,
        properties: dict[bytes, bytes] | None = None,
    ) -> None:
        """`properties` go in our READY besides the identity (a child's credential)."""
        if endpoint.startswith("tls://"):  # an agent on another machine (`ipc.tls`)
            self._tcp: tuple[str, int] | None = tls.parse_endpoint(endpoint)
        elif endpoint.startswith("ipc://"):
            self._tcp = None
        else:
            raise ValueError(f"an agent connects to an ipc:// or tls:// endpoint, not {endpoint!r}")
        self.endpoint = endpoint
        self._path = endpoint.removeprefix("ipc://")
        self._ready_command = zmtp.ready(b"DEALER", identity.encode(), properties)
        self._on_frames = on_frames
        self._on_disconnect = on_disconnect
        self._transport: asyncio.Transport | None = None
        self._ready = False  # the peer's READY came: messages may go out
        self._held: list[bytes] = []  # encoded messages waiting for a handshake
        self._closed = False
        self._tasks = TaskSet("dealer")  # the connection attempt under way

    def start(self) -> None:
        self._tasks.spawn(self._connect(), name="dealer connect")

    def send(self, frames: Frames) -> None:
        """Never blocks: before the handshake (or between connections) the message waits.
        Raises `zmtp.MessageTooLarge` over `zmtp.MAX_MESSAGE_BYTES`."""
        data = zmtp.check_size(zmtp.message(frames))
        transport = self._transport
        if self._ready and transport is not None and not transport.is_closing():
            transport.write(data)
        elif not self._closed:
            self._held.append(data)  # a closing connection: for the next one

    @property
    def pending_bytes(self) -> int:
        """What is sent but not yet handed to the OS."""
        held = sum(map(len, self._held))
        return held + (self._transport.get_write_buffer_size() if self._transport else 0)

    async def flush(self, timeout_s: float) -> bool:
        """Wait until everything sent is with the OS; False if it is not by the timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.pending_bytes and loop.time() < deadline and not self._closed:
            await asyncio.sleep(0.001)
        return not self.pending_bytes

    def close(self) -> None:
        """Stop, dropping what is not yet with the OS (`flush` first to keep it)."""
        if self._closed:
            return
        self._closed = True
        self._tasks.cancel()
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        self._ready = False
        self._held.clear()

    # -- connection ---------------------------------------------------------------------------

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                if self._tcp is None:
                    await loop.create_unix_connection(lambda: _Connection(self), self._path)
                else:
                    host, port = self._tcp
                    await loop.create_connection(
                        lambda: _Connection(self), host, port, ssl=tls.get_client_context()
                    )
                return
            except OSError:  # not listening (yet or any more): as libzmq, try again
                await asyncio.sleep(RECONNECT_S)

    def _connected(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        transport.write(zmtp.GREETING + self._ready_command)

    def _peer_ready(self) -> None:
        if self._ready:
            raise zmtp.ProtocolError("a second READY")
        self._ready = True
        if self._held:
            self._transport.writelines(self._held)  # type: ignore[union-attr]
            self._held.clear()

    def _on_command(self, name: bytes, data: bytes) -> None:
        if name == b"READY":
            self._peer_ready()
        elif name == b"PING":
            if self._transport is not None:
                self._transport.write(zmtp.pong(data))
        elif name == b"ERROR":
            raise zmtp.refusal(data)
        # PONG, SUBSCRIBE, ...: nothing a DEALER needs

    def _lost(self, reason: str) -> None:
        self._transport = None
        self._ready = False
        if self._closed:
            return
        if self._on_disconnect is not None:
            self._on_disconnect(reason)
        loop = asyncio.get_running_loop()
        loop.call_later(RECONNECT_S, self._reconnect)

    def _reconnect(self) -> None:
        if not self._closed:
            self._tasks.spawn(self._connect(), name="dealer connect")


class _Connection(asyncio.Protocol):
    """One connection of a Dealer: reads frames into it, tells it when the connection ends."""

    def __init__(self, dealer: Dealer) -> None:
        self._dealer = dealer
        self._transport: asyncio.Transport | None = None
        self._reader = zmtp.Reader(self._on_message, dealer._on_command)
        self._why: str = "the peer closed the connection"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the asyncio.Transport methods but not its class
        self._transport = cast(asyncio.Transport, transport)
        self._dealer._connected(self._transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._reader.feed(data)
        except zmtp.ProtocolError as exc:
            self._why = f"ZMTP protocol error: {exc}"
            assert self._transport is not None
            self._transport.abort()

    def _on_message(self, frames: Frames) -> None:
        if not self._dealer._ready:
            raise zmtp.ProtocolError("a message before the handshake")
        self._dealer._on_frames(frames)

    def connection_lost(self, exc: Exception | None) -> None:
        self._dealer._lost(self._why if exc is None else f"{self._why}: {exc}")


async def send_once(
    endpoint: str,
    identity: str,
    frame: bytes,
    timeout_s: float = 1.0,
    properties: dict[bytes, bytes] | None = None,
) -> bool:
    """Connect, send one message and close once it is with the OS (False if not within
    `timeout_s`): for a process that reports why it cannot start, then exits."""
    dealer = Dealer(endpoint, identity, lambda frames: None, properties=properties)
    dealer.start()
    dealer.send([frame])
    try:
        return await dealer.flush(timeout_s)
    finally:
        dealer.close()
