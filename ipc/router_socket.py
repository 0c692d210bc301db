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

Whoever can open the socket file may connect, so what a peer can take is bounded:
- a connection must finish its handshake within a deadline, and only so many may be in their
  handshake at once (a new one pushes out the oldest, once that had a grace period);
- the connections together stay under a share of the open-file limit (past it a new one is
  closed at once), and out of descriptors accepting pauses instead of failing;
- the bytes of messages not yet complete, across all connections, stay within a budget (the
  connection whose read passes it is dropped).
Each of these is reported to `on_peer_error`, at most once per `report_interval_s` for each kind,
so a flood is one line.
"""

from __future__ import annotations

import asyncio
import errno
import os
import resource
import secrets
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ipc import tls, zmtp
from ipc.router_limits import DEFAULT_LIMITS, RouterLimits
from ipc.tasks import TaskSet

if TYPE_CHECKING:
    import ssl

Frames = list[bytes]


DEFAULT_FD_SHARE = 0.75  # of the open files, for a router not given a cap of its own


class Unroutable(Exception):
    """No connected peer has this identity (it exited, or has not connected yet)."""


Admit = Callable[[bytes, dict[bytes, bytes]], str | None]
"""`admit(identity, properties)` sees a peer's READY: None lets it in, a reason refuses it."""


def connection_cap(share: float, reserve: int = DEFAULT_LIMITS.fd_reserve) -> int:
    """`share` of the descriptors this process may open, past `reserve`: how many connections
    one socket may hold (read after the daemon raised its limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = 1 << 20 if soft == resource.RLIM_INFINITY else soft
    return max(1, int((limit - reserve) * share))


class RouterSocket:
    """Binds a unix socket (mode 0600, a stale file replaced) and routes whole messages.

    `on_frames([identity, *frames])` is called synchronously for every message; it must not
    block. `on_peer_error(identity, reason)` is told when a peer is dropped for breaking the
    protocol or refused by `admit` (identity None before its handshake), and, rate-limited,
    when a limit refuses or drops connections. With `admit`, a peer is routable (and may take
    over an identity) only once admitted.

    Limits (`RouterLimits`): `max_connections` open at once (None: `connection_cap()` of
    DEFAULT_FD_SHARE when started), `max_handshaking` of them before their READY, each for at
    most `handshake_timeout_s`, and `max_buffered_bytes` of incomplete messages in all."""

    def __init__(
        self,
        endpoint: str,
        on_frames: Callable[[Frames], None],
        *,
        on_peer_error: Callable[[bytes | None, str], None] | None = None,
        admit: Admit | None = None,
        max_connections: int | None = None,
        limits: RouterLimits = DEFAULT_LIMITS,
    ) -> None:
        if not endpoint.startswith("ipc://"):
            raise ValueError(f"the router binds an ipc:// endpoint, not {endpoint!r}")
        self.path = Path(endpoint.removeprefix("ipc://"))
        self._on_frames = on_frames
        self._on_peer_error = on_peer_error
        self._admit = admit
        self._max_connections = max_connections
        self._limits = limits
        self._max_handshaking = limits.max_handshaking
        self._handshake_timeout_s = limits.handshake_timeout_s
        self._handshake_grace_s = limits.handshake_grace_s
        self._max_buffered = limits.max_buffered_bytes
        self._pong_unread_bytes = limits.pong_unread_bytes
        self._peers: dict[bytes, _Peer] = {}  # by identity, once their handshake is done
        self._connections: set[_Peer] = set()  # every open one, handshake done or not
        self._handshaking: dict[_Peer, asyncio.TimerHandle] = {}  # oldest first, with deadlines
        self._accepting = 0  # accepted, not yet connected to a protocol
        self._attaching = TaskSet("router socket")  # connections being handed to the loop
        self._buffered = 0  # bytes of incomplete messages, all connections together
        self._to_flush: list[_Peer] = []  # peers with messages in their outbox
        self._reports = _Reports(self._refused, limits.report_interval_s)
        self._listening = False  # the loop watches our socket for connections
        self._resume: asyncio.TimerHandle | None = None  # while accepting is paused
        self._waiting_for_room = False  # paused until a handshake ends
        self._loop: asyncio.AbstractEventLoop  # set by `start`, before any peer can connect
        self._closed = False
        self._sock = _bind(
            self.path, limits.backlog
        )  # connections wait in the backlog until `start`
        self._tls_server: asyncio.AbstractServer | None = None

    def start(self) -> None:
        # kept: CPython 3.11's get_running_loop() makes a getpid() system call each time
        self._loop = asyncio.get_running_loop()
        if self._max_connections is None:
            self._max_connections = connection_cap(DEFAULT_FD_SHARE, self._limits.fd_reserve)
        self._resume_accepting()

    async def listen_tls(self, host: str, port: int, context: ssl.SSLContext) -> tuple[str, int]:
        """Also accept peers over TCP with mutual TLS (agents on other machines): the same
        identities, handshake deadline and limits. Returns the address bound (port 0: any)."""

        def new_peer() -> _Peer:
            peer = _Peer(self, accepted=False)
            # A failed TLS handshake never reaches the protocol: a peer that has not
            # connected by the deadline is reported (rate-limited) as refused.
            peer.tls_deadline = self._loop.call_later(
                self._handshake_timeout_s + 1.0, self._tls_unfinished, peer
            )
            return peer

        self._tls_server = await self._loop.create_server(
            new_peer,
            host,
            port,
            ssl=context,
            ssl_handshake_timeout=self._handshake_timeout_s,
            backlog=self._limits.backlog,
        )
        bound = self._tls_server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

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

    def peer_uid(self, identity: bytes) -> int | None:
        """The uid of the process at the other end of `identity`'s connection (the kernel's
        SO_PEERCRED), or None when it is gone or the platform cannot tell."""
        peer = self._peers.get(identity)
        sock = peer.transport.get_extra_info("socket") if peer is not None else None
        if sock is None or not hasattr(socket, "SO_PEERCRED"):
            return None
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
        uid: int = struct.unpack("3i", creds)[1]
        return uid

    @property
    def peers(self) -> int:
        """Connected peers that have done their handshake."""
        return len(self._peers)

    @property
    def connections(self) -> int:
        """Open connections, their handshake done or not."""
        return len(self._connections) + self._accepting

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for incomplete messages, all connections together."""
        return self._buffered

    def close(self) -> None:
        """Stop accepting and close every connection (what they hold is still written);
        `wait_closed` then waits for what was being accepted."""
        if self._closed:
            return
        self._closed = True
        self._attaching.cancel()
        self._flush()
        if self._resume is not None:
            self._resume.cancel()
        if self._listening:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        if self._tls_server is not None:
            self._tls_server.close()
        for peer in list(self._connections):
            peer.transport.close()
        self._peers.clear()
        self.path.unlink(missing_ok=True)

    async def wait_closed(self) -> None:
        """After `close`: return once no task of the socket is left."""
        await self._attaching.close()

    # -- accepting -----------------------------------------------------------------------------

    def _accept(self) -> None:
        """Accept what waits in the backlog, within the limits; the loop calls us again while
        more waits (the listening socket stays readable)."""
        assert self._max_connections is not None  # set by `start`
        for _ in range(self._limits.accept_batch):
            if self._accepting >= self._max_handshaking:
                return  # the rest wait in the backlog until these are connected
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:
                    continue
                # Out of descriptors (or kernel memory): serve what we have, and try again
                # later rather than spin on the error.
                self._pause_accepting(self._limits.accept_pause_s)
                self._reports.tell(
                    "accept",
                    None,
                    f"cannot accept a connection ({exc.strerror or exc}): new connections "
                    f"wait, retried every {self._limits.accept_pause_s:g} s",
                )
                return
            if self.connections >= self._max_connections:
                conn.close()
                self._reports.tell(
                    "connections",
                    None,
                    f"at the connection cap ({self._max_connections}): a new connection "
                    "refused (closed at once)",
                )
                continue
            full = len(self._handshaking) + self._accepting >= self._max_handshaking
            wait = self._push_out_oldest_handshaking() if full else 0.0
            self._accepting += 1
            peer = _Peer(self)
            self._attaching.spawn(self._attach(conn, peer), name="attach connection")
            if wait > 0:  # all too young to push out: the backlog waits for a free place
                self._pause_accepting(wait)
                self._waiting_for_room = True
                return

    async def _attach(self, conn: socket.socket, peer: _Peer) -> None:
        conn.setblocking(False)
        try:
            await self._loop.connect_accepted_socket(lambda: peer, conn)
        except BaseException as exc:  # the loop could not take it (out of memory, say)
            if not peer.attached:
                self._accepting -= 1
            conn.close()
            if not isinstance(exc, Exception):
                raise  # cancelled: the socket is closing
            self._reports.tell("attach", None, f"a new connection could not be served: {exc!r}")

    def _pause_accepting(self, delay_s: float) -> None:
        self._listening = False
        self._loop.remove_reader(self._sock.fileno())
        self._resume = self._loop.call_later(delay_s, self._resume_accepting)

    def _resume_accepting(self) -> None:
        self._resume = None
        self._waiting_for_room = False
        if not self._closed:
            self._listening = True
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _push_out_oldest_handshaking(self) -> float:
        """Drop the oldest connection still in its handshake, if it had `handshake_grace_s` to
        send its READY; else how long until it has had them."""
        if not self._handshaking:  # all still being attached
            return self._handshake_grace_s
        oldest, deadline = next(iter(self._handshaking.items()))
        waited = self._loop.time() - (deadline.when() - self._handshake_timeout_s)
        if waited < self._handshake_grace_s:
            return self._handshake_grace_s - waited
        self._reports.tell(
            "handshaking",
            None,
            f"{self._max_handshaking} connections in their handshake: the oldest dropped",
        )
        oldest.drop()
        return 0.0

    def _handshake_expired(self, peer: _Peer) -> None:
        self._reports.tell(
            "handshake timeout",
            None,
            f"no handshake within {self._handshake_timeout_s:g} s: connection dropped",
        )
        peer.drop()

    # -- peers ---------------------------------------------------------------------------------

    def _tls_unfinished(self, peer: _Peer) -> None:
        if not peer.attached:
            self._reports.tell(
                "tls",
                None,
                "a TCP peer did not finish its TLS handshake (no certificate of this "
                "orchestrator, or too slow): closed",
            )

    def _connected(self, peer: _Peer) -> None:
        if peer.accepted:
            self._accepting -= 1
        elif peer.tls_deadline is not None:
            peer.tls_deadline.cancel()
        if self._closed:
            peer.transport.close()
            return
        self._connections.add(peer)
        deadline = self._loop.call_later(self._handshake_timeout_s, self._handshake_expired, peer)
        self._handshaking[peer] = deadline

    def _handshake_ended(self, peer: _Peer) -> None:
        deadline = self._handshaking.pop(peer, None)
        if deadline is None:
            return
        deadline.cancel()
        if self._waiting_for_room and self._resume is not None:  # there is room now
            self._resume.cancel()
            self._resume_accepting()

    def _register(self, peer: _Peer, identity: bytes) -> None:
        self._handshake_ended(peer)
        old = self._peers.get(identity)
        self._peers[identity] = peer
        if old is not None:  # handover: the newer connection is the peer now
            old.transport.close()

    def _hold(self, peer: _Peer, buffered: int) -> None:
        """`peer` now holds `buffered` bytes of an incomplete message; past the budget, the
        peer is dropped. Dropping (not pausing its reads) frees the memory at once: a paused
        peer would keep it, and its sender need never finish."""
        self._buffered += buffered - peer.held
        peer.held = buffered
        if self._buffered > self._max_buffered and buffered > 0:
            self._reports.tell(
                "memory",
                peer.identity,
                f"incomplete messages over the {self._max_buffered:,}-byte budget of all "
                f"connections: the connection reading more ({buffered:,} bytes) dropped",
            )
            peer.drop()

    def _unregister(self, peer: _Peer) -> None:
        self._connections.discard(peer)
        self._buffered -= peer.held
        peer.held = 0
        self._handshake_ended(peer)
        if peer.identity is not None and self._peers.get(peer.identity) is peer:
            del self._peers[peer.identity]

    def _dropped(self, peer: _Peer, reason: str) -> None:
        self._refused(peer.identity, reason)

    def _refused(self, identity: bytes | None, reason: str) -> None:
        if self._on_peer_error is not None:
            self._on_peer_error(identity, reason)


class _Reports:
    """Reports of one kind at most once per `interval_s`, with how many there were."""

    def __init__(self, report: Callable[[bytes | None, str], None], interval_s: float) -> None:
        self._report = report
        self._interval_s = interval_s
        self._last: dict[str, float] = {}  # kind: when it was last reported
        self._count: dict[str, int] = {}  # kind: how many since

    def tell(self, kind: str, identity: bytes | None, text: str) -> None:
        count = self._count[kind] = self._count.get(kind, 0) + 1
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval_s:
            return
        self._last[kind] = now
        del self._count[kind]
        if count > 1:
            text += f" ({count} times since the last report)"
        self._report(identity, text)


def _bind(path: Path, backlog: int) -> socket.socket:
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
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


class _Refused(zmtp.ProtocolError):
    """`admit` turned the peer away."""


class _Peer(asyncio.Protocol):
    """One connection: the handshake, then its messages, tagged with its identity."""

    def __init__(self, router: RouterSocket, *, accepted: bool = True) -> None:
        """`accepted`: counted in the router's `_accepting` (ours, not a TLS server's)."""
        self._router = router
        self.accepted = accepted
        self.tls_deadline: asyncio.TimerHandle | None = None
        self._reader = zmtp.Reader(self._on_message, self._on_command)
        self.identity: bytes | None = None  # known once its READY came
        self.outbox: list[bytes] = []  # sent since the router's last flush
        self.held = 0  # bytes of an incomplete message, as counted in the router's budget
        self.attached = False  # connection_made has come
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the asyncio.Transport methods but not its class
        self.transport = cast(asyncio.Transport, transport)
        self.attached = True
        self.transport.write(zmtp.GREETING + _READY)
        self._router._connected(self)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        try:
            reader.feed(data)
        except _Refused:
            return  # reported, and closing
        except zmtp.ProtocolError as exc:
            self._router._dropped(self, f"ZMTP protocol error: {exc}")
            self.drop()
            return
        # Only a read that leaves a message incomplete (or completes one) does any accounting.
        if reader.buffered != self.held:
            self._router._hold(self, reader.buffered)

    def drop(self) -> None:
        """Close now, without writing what waits, and let go of what was read."""
        self._reader = _CLOSED_READER
        self._router._unregister(self)  # at once: no longer counted, routable or waited for
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
            if not self.accepted:  # over TLS: who the certificate says it is
                found[tls.PEER_NAME_PROPERTY] = (
                    tls.peer_name(self.transport.get_extra_info("ssl_object")) or b""
                )
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
            # A peer that does not read what we write needs no PONG: else a flood of PINGs
            # would grow our write buffer without end.
            if self.transport.get_write_buffer_size() < self._router._pong_unread_bytes:
                self.transport.write(zmtp.pong(data))
        elif name == b"ERROR":
            raise zmtp.refusal(data)
        # PONG and the rest: nothing a ROUTER needs

    def connection_lost(self, exc: Exception | None) -> None:
        self._router._unregister(self)
        # The reader's callbacks are our bound methods: a cycle that would keep what it read
        # until a garbage collection.
        self._reader = _CLOSED_READER
        self.outbox = []


def _ignore_message(frames: Frames) -> None:
    pass


def _ignore_command(name: bytes, data: bytes) -> None:
    pass


_READY = zmtp.ready(b"ROUTER")
_CLOSED_READER = zmtp.Reader(_ignore_message, _ignore_command)  # never fed: its peer is gone
