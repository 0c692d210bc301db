"""What a hostile neighbour on the same host can do with plain files and sockets.

Each function is one episode and returns a short note of what it did; none of them reads the
daemon's memory or imports its code beyond the wire codec (which any peer could copy).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import struct
import time
from pathlib import Path

import zmq

from ipc import wire
from ipc.endpoints import ipc_endpoint

GREETING_HEAD = b"\xff" + b"\x00" * 8 + b"\x7f"  # ZMTP 3 signature
HUGE_FRAME = 1 << 40  # declared, never sent: a receiver must not allocate it


def _greeting() -> bytes:
    return GREETING_HEAD + b"\x03\x01" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def _ready_command(socket_type: bytes) -> bytes:
    name = b"Socket-Type"
    body = b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(socket_type))
    body += socket_type
    return b"\x04" + bytes([len(body)]) + body


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2.0)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def half_open(sockets: list[Path], per_socket: int, hold_s: float) -> str:
    """Hold `per_socket` connections to each socket that never finish the handshake (half of
    them send the first bytes of a greeting), then close them."""
    held: list[socket.socket] = []
    refused = 0
    try:
        for path in sockets:
            for i in range(per_socket):
                sock = _connect(path)
                if sock is None:
                    refused += 1
                    continue
                if i % 2:
                    with contextlib.suppress(OSError):
                        sock.send(GREETING_HEAD)
                held.append(sock)
        time.sleep(hold_s)
    finally:
        for sock in held:
            sock.close()
    return f"{len(held)} held {hold_s:g}s, {refused} refused"


def garbage(sockets: list[Path], per_socket: int) -> str:
    """Connections that send random bytes, then a ZMTP-looking signature with a bad version."""
    sent = 0
    for path in sockets:
        for i in range(per_socket):
            sock = _connect(path)
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                junk = os.urandom(256) if i % 2 else GREETING_HEAD + b"\x09\x09" + os.urandom(52)
                sock.sendall(junk)
                sent += 1
            sock.close()
    return f"{sent} connections of garbage"


def huge_frame(sockets: list[Path]) -> str:
    """A proper greeting and READY, then a message frame declaring 1 TiB, a little of it,
    and the connection held open a moment."""
    sent = 0
    for path in sockets:
        sock = _connect(path)
        if sock is None:
            continue
        with contextlib.suppress(OSError):
            sock.sendall(_greeting() + _ready_command(b"DEALER"))
            sock.sendall(b"\x02" + struct.pack(">Q", HUGE_FRAME) + os.urandom(4096))
            sent += 1
            time.sleep(0.3)
        sock.close()
    return f"{sent} frames declaring {HUGE_FRAME} bytes"


_ROUTER_ID = re.compile(r"^([0-9a-f]+)-(\d+)$")


def forged_results(agents_socket: Path, identity: str, journal_ids: list[str]) -> str:
    """A libzmq DEALER with the identity of a real agent sends `delegate_result`s for the
    request ids a reader of the journal can guess (the latest ones, and the next ones)."""
    guesses: list[str] = []
    latest: dict[str, int] = {}
    for rid in journal_ids:
        found = _ROUTER_ID.match(rid)
        if found:
            latest[found.group(1)] = max(latest.get(found.group(1), 0), int(found.group(2)))
    for boot, top in latest.items():
        guesses.extend(f"{boot}-{n}" for n in range(max(1, top - 10), top + 40))
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, identity.encode())
    sock.setsockopt(zmq.SNDTIMEO, 500)
    sent = 0
    try:
        sock.connect(ipc_endpoint(agents_socket))
        time.sleep(0.1)  # let the handshake finish
        for cid in guesses:
            forged = wire.DelegateResult("ok", identity, f"FORGED by the soak for {cid}")
            frame = wire.encode(
                wire.DELEGATE_RESULT, identity, wire.ORCHESTRATOR, forged, correlation_id=cid
            )
            with contextlib.suppress(zmq.Again):
                sock.send(frame)
                sent += 1
        time.sleep(0.5)  # hold the identity a moment: whatever is routed to it goes nowhere
    finally:
        sock.close(linger=0)
        ctx.term()
    return f"as {identity}: {sent} forged results for {len(latest)} boot ids"


def fill_disk(directory: Path, hold_s: float) -> tuple[int, str]:
    """Write a file in `directory` until the file system is full, keep it `hold_s`, delete
    it. (bytes written, note)"""
    path = directory / "soak-filler"
    written = 0
    chunk = b"\0" * (1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                n = os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                chunk = chunk[: len(chunk) // 2]  # fill the last pages too
                if len(chunk) < 4096:
                    break
                continue
            written += n
        time.sleep(hold_s)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return written, f"{written >> 20} MiB written, held {hold_s:g}s"
