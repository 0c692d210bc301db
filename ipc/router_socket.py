"""A ZeroMQ ROUTER that speaks ZMTP itself, from the event loop, on a unix socket.

The orchestrator's `agents.sock`: every agent, connector and requester is a DEALER connected
here, and every message of the swarm crosses it twice. With libzmq each of those crossed the
orchestrator's two threads (libzmq's I/O thread reads, wakes the loop's thread, which routes
and wakes the I/O thread again to write); at 200 busy agents on 2 cores each wake-up is a
context switch. Here the loop reads, routes and writes the unix sockets itself.

Peers see an ordinary ZMTP 3.1 ROUTER with the NULL mechanism and keep libzmq's semantics that
the orchestrator relies on:
- a peer is known by the Identity of its READY (a peer without one gets a generated one, as
  libzmq does); messages arrive as `[identity, *frames]`;
- `send([identity, *frames])` to a peer that is not connected raises `Unroutable` at once
  (ROUTER_MANDATORY), so the caller can answer with an error instead of losing the message;
- a new connection with the identity of a connected peer takes it over, and the old one is
  closed (ROUTER_HANDOVER): a respawned agent gets its messages even before the old
  connection's end is noticed.
Messages for one peer are written together once per loop turn (one system call however many
there are, as libzmq's I/O thread batches its writes). What a peer cannot take yet waits in its
connection's buffer, unbounded, as it waited in libzmq's pipe (its high-water mark was 200,000
messages) and then in `ipc.channel`'s outbox.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import cast

from ipc import zmtp

Frames = list[bytes]
BACKLOG = 1024  # connections waiting to be accepted: 200 agents may start at once


class Unroutable(Exception):
    """No connected peer has this identity (it exited, or has not connected yet)."""


Admit = Callable[[bytes, dict[bytes, bytes]], str | None]
"""`admit(identity, properties)` sees a peer's READY: None lets it in, a reason refuses it."""


class RouterSocket:
    """Binds a unix socket (mode 0600, a stale file replaced) and routes whole messages.

    `on_frames([identity, *frames])` is called synchronously for every message; it must not
    block. `on_peer_error(identity, reason)` is told when a peer is dropped for breaking the
    protocol or refused by `admit` (identity None before its handshake). With `admit`, a peer
    is routable (and may take over an identity) only once admitted."""

    def __init__(
        self,
        endpoint: str,
        on_frames: Callable[[Frames], None],
        *,
        on_peer_error: Callable[[bytes | None, str], None] | None = None,
        admit: Admit | None = None,
    ) -> None:
        if not endpoint.startswith("ipc://"):
            raise ValueError(f"the router binds an ipc:// endpoint, not {endpoint!r}")
        self.path = Path(endpoint.removeprefix("ipc://"))
        self._on_frames = on_frames
        self._on_peer_error = on_peer_error
        self._admit = admit
        self._peers: dict[bytes, _Peer] = {}  # by identity, once their handshake is done
        self._connections: set[_Peer] = set()  # every open one, handshake done or not
        self._to_flush: list[_Peer] = []  # peers with messages in their outbox
        self._server: asyncio.AbstractServer | None = None
        self._starting: asyncio.Task[asyncio.AbstractServer] | None = None
        self._loop: asyncio.AbstractEventLoop  # set by `start`, before any peer can connect
        self._closed = False
        self._sock = _bind(self.path)  # connections wait in the backlog until `start`

    def start(self) -> None:
        # kept: CPython 3.11's get_running_loop() makes a getpid() system call each time
        self._loop = loop = asyncio.get_running_loop()
        serve = loop.create_unix_server(lambda: _Peer(self), sock=self._sock, backlog=BACKLOG)
        self._starting = loop.create_task(serve)
        self._starting.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[asyncio.AbstractServer]) -> None:
        if not task.cancelled() and task.exception() is None:
            self._server = task.result()
            if self._closed:
                self._server.close()

    def send(self, frames: Frames) -> None:
        """`frames[0]` is the peer's identity. Never blocks; raises `Unroutable`, and
        `zmtp.MessageTooLarge` for what the peer's reader would refuse."""
        peer = self._peers.get(frames[0])
        if peer is None or peer.transport.is_closing():
            raise Unroutable(frames[0])
        data = zmtp.check_size(zmtp.message(frames[1:]), zmtp.MAX_READ_BYTES)
        if not peer.outbox:
            if not self._to_flush:
                self._loop.call_soon(self._flush)
            self._to_flush.append(peer)
        peer.outbox.append(data)

    def _flush(self) -> None:
        """Write what each peer got since the last flush: one system call per peer per loop
        turn, however many messages (libzmq's I/O thread batches its writes the same way)."""
        peers, self._to_flush = self._to_flush, []
        for peer in peers:
            out, peer.outbox = peer.outbox, []
            if not peer.transport.is_closing():
                peer.transport.writelines(out)

    @property
    def peers(self) -> int:
        """Connected peers that have done their handshake."""
        return len(self._peers)

    def close(self) -> None:
        """Stop accepting and close every connection (what they hold is still written)."""
        if self._closed:
            return
        self._closed = True
        self._flush()
        if self._server is not None:
            self._server.close()
        self._sock.close()  # ours, whether the server took it or a duplicate of it
        for peer in list(self._connections):
            peer.transport.close()
        self._peers.clear()
        self.path.unlink(missing_ok=True)

    # -- peers ---------------------------------------------------------------------------------

    def _register(self, peer: _Peer, identity: bytes) -> None:
        old = self._peers.get(identity)
        self._peers[identity] = peer
        if old is not None:  # handover: the newer connection is the peer now
            old.transport.close()

    def _unregister(self, peer: _Peer) -> None:
        self._connections.discard(peer)
        if peer.identity is not None and self._peers.get(peer.identity) is peer:
            del self._peers[peer.identity]

    def _dropped(self, peer: _Peer, reason: str) -> None:
        self._refused(peer.identity, reason)

    def _refused(self, identity: bytes | None, reason: str) -> None:
        if self._on_peer_error is not None:
            self._on_peer_error(identity, reason)


def _bind(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)  # a stale socket file from a dead daemon
    old_umask = os.umask(0o177)  # the socket file is created 0600
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old_umask)
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


class _Refused(zmtp.ProtocolError):
    """`admit` turned the peer away."""


class _Peer(asyncio.Protocol):
    """One connection: the handshake, then its messages, tagged with its identity."""

    def __init__(self, router: RouterSocket) -> None:
        self._router = router
        self._reader = zmtp.Reader(self._on_message, self._on_command)
        self.identity: bytes | None = None  # known once its READY came
        self.outbox: list[bytes] = []  # sent since the router's last flush
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the asyncio.Transport methods but not its class
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(zmtp.GREETING + _READY)
        self._router._connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self._reader.feed(data)
        except _Refused:
            pass  # reported, and closing
        except zmtp.ProtocolError as exc:
            self._router._dropped(self, f"ZMTP protocol error: {exc}")
            self.transport.abort()

    def _on_message(self, frames: Frames) -> None:
        if self.identity is None:
            raise zmtp.ProtocolError("a message before the handshake")
        frames.insert(0, self.identity)
        try:
            self._router._on_frames(frames)
        except Exception as exc:  # a bug in the handler must not cost the peer its connection
            asyncio.get_running_loop().call_exception_handler(
                {"message": f"{self._router.path}: handling a message failed", "exception": exc}
            )

    def _on_command(self, name: bytes, data: bytes) -> None:
        if name == b"READY":
            if self.identity is not None:
                raise zmtp.ProtocolError("a second READY")
            found = zmtp.properties(data)
            # libzmq gives a peer without an identity a generated one that starts with 0
            identity = found.get(b"Identity") or b"\0" + secrets.token_bytes(4)
            admit = self._router._admit
            refused = admit(identity, found) if admit is not None else None
            if refused is not None:
                self.transport.write(zmtp.error(refused))
                self._router._refused(identity, f"refused: {refused}")
                self.transport.close()  # after the ERROR is written
                raise _Refused(refused)  # nothing more from this peer is read
            self.identity = identity
            self._router._register(self, identity)
        elif name == b"PING":
            self.transport.write(zmtp.pong(data))
        elif name == b"ERROR":
            raise zmtp.refusal(data)
        # PONG and the rest: nothing a ROUTER needs

    def connection_lost(self, exc: Exception | None) -> None:
        self._router._unregister(self)


_READY = zmtp.ready(b"ROUTER")
