"""Event-loop I/O for a ZeroMQ socket without awaiting once per message.

The loop watches the socket's file descriptor and drains every waiting message on each wake-up.
ZeroMQ's descriptor is edge-triggered, and a send may consume the "readable" edge, so after each
send we re-check `ZMQ_EVENTS` and drain again if needed (`reference/ipc-limits.md`: 3-4x the
throughput of `await sock.recv()` per message).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

import zmq

Frames = list[bytes]

# Plain ints: pyzmq's flags are enum members, and `int & IntFlag` builds a new member each time.
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK) | int(zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_RCVMORE = int(zmq.RCVMORE)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)


class Channel:
    """Drives one sync ZeroMQ socket from an asyncio loop.

    `on_frames` is called synchronously for every received message (a list of frames); it must
    not block. `send` never blocks: when the peer's queue is full the message waits in an outbox,
    in order, until the socket can take it.
    """

    def __init__(
        self,
        sock: zmq.Socket[bytes],
        on_frames: Callable[[Frames], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.sock = sock
        self._on_frames = on_frames
        self._loop = loop or asyncio.get_running_loop()
        self._outbox: deque[Frames] = deque()
        self._drain_scheduled = False
        self._draining = False
        self._closed = False

    def start(self) -> None:
        self._loop.add_reader(self.sock.FD, self._on_readable)
        self._schedule_drain()  # messages may have arrived before we started watching

    def close(self, linger_ms: int = 0) -> None:
        """Stop watching and close; `linger_ms` lets libzmq deliver what it already holds."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self.sock.FD)
        self.sock.close(linger=linger_ms)

    async def flush(self, timeout_s: float) -> bool:
        """Wait until the outbox is handed to libzmq; False if it is still full at the end."""
        deadline = self._loop.time() + timeout_s
        while self._outbox and self._loop.time() < deadline and not self._closed:
            self._schedule_drain()
            await asyncio.sleep(0.001)
        return not self._outbox

    @property
    def pending_sends(self) -> int:
        return len(self._outbox)

    def send(self, frames: Frames) -> None:
        """Queue-free fast path; raises `zmq.ZMQError` (EHOSTUNREACH) for an unroutable peer
        on a ROUTER with ROUTER_MANDATORY, so the caller can answer with an error."""
        if self._closed:
            return
        if self._outbox:
            self._outbox.append(frames)
        else:
            try:
                self._send_now(frames)
            except zmq.Again:
                self._outbox.append(frames)
        # The send may have consumed the fd's "readable" edge. Inside the drain loop (a send
        # from a message handler) the loop looks at ZMQ_EVENTS again anyway; otherwise look
        # now, and drain on the next loop turn only if something is waiting.
        if self._draining or self._drain_scheduled:
            return
        if self._outbox:
            self._schedule_drain()
            return
        events: int = self.sock.getsockopt(_EVENTS)  # type: ignore[assignment]  # an int option
        if events & _POLLIN:
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled and not self._closed:
            self._drain_scheduled = True
            self._loop.call_soon(self._on_readable)

    def _on_readable(self) -> None:
        self._drain_scheduled = False
        self._draining = True
        try:
            self._drain()
        finally:
            self._draining = False
        if self._outbox and not self._closed:
            # The peer is slow; try again shortly rather than spinning.
            self._loop.call_later(0.001, self._schedule_drain)

    def _drain(self) -> None:
        sock = self.sock
        while not self._closed:
            events: int = sock.getsockopt(_EVENTS)  # type: ignore[assignment]
            progressed = False
            if self._outbox and events & _POLLOUT:
                progressed = self._flush_outbox()
            if events & _POLLIN:
                try:
                    frames = [sock.recv(_NOBLOCK)]
                except zmq.Again:
                    pass
                else:
                    # The parts of a message arrive together: once the first is here, the
                    # rest are (what recv_multipart does, without its per-call enum work).
                    while sock.getsockopt(_RCVMORE):
                        frames.append(sock.recv(_NOBLOCK))
                    self._on_frames(frames)
                    progressed = True
            if not progressed:
                break

    def _send_now(self, frames: Frames) -> None:
        # send_multipart would do the same with enum flags (`SNDMORE | flags` builds a new enum
        # member in Python) at twice the cost. A peer that cannot take the message fails the
        # first part (EAGAIN, or EHOSTUNREACH on a mandatory ROUTER), before any part is queued.
        sock = self.sock
        last = len(frames) - 1
        for i in range(last):
            sock.send(frames[i], _NOBLOCK_MORE)
        sock.send(frames[last], _NOBLOCK)

    def _flush_outbox(self) -> bool:
        sent = False
        while self._outbox:
            try:
                self._send_now(self._outbox[0])
            except zmq.Again:
                break
            except zmq.ZMQError:
                pass  # unroutable now (peer gone): drop it; the router accounts for it
            self._outbox.popleft()
            sent = True
        return sent
