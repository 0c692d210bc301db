"""ZeroMQ endpoints and socket options, in one place.

Endpoints are `ipc://` paths in a directory only the owner can enter: the file system is the
access control. Options follow `reference/peers.md` §5: ROUTER_MANDATORY so an unroutable send
fails at once, ROUTER_HANDOVER so a respawned agent can take over its identity, a short LINGER,
high-water marks large enough for thousands of requests in flight, and the message size limit
our own ZMTP reader keeps (`ipc.zmtp.MAX_READ_BYTES`; libzmq's default is none).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ipc import zmtp

# Set by the orchestrator when OpenTelemetry export is on: where agents send ended spans
# (`ipc.spans`). Here, not there, so a run without export never imports that module.
SPAN_SOCKET_ENV = "GOONDAN_SPAN_SOCKET"

if TYPE_CHECKING:  # imported where a socket is made: the daemon speaks ZMTP itself, no pyzmq
    import zmq

# Linux limits a unix socket path to 107 bytes; we check it ourselves to give a clear error.
MAX_IPC_PATH = 107
HWM = 200_000
LINGER_MS = 100


class EndpointError(Exception):
    pass


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (mode 0700) or tighten it; refuse one owned by another user."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise EndpointError(f"{path} belongs to another user; choose another --state-root")
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
    return path


def ipc_endpoint(socket_path: Path) -> str:
    text = str(socket_path)
    if len(text.encode()) > MAX_IPC_PATH:
        raise EndpointError(
            f"socket path {text} is longer than {MAX_IPC_PATH} bytes (a Linux limit); "
            "use a shorter --state-root"
        )
    return f"ipc://{text}"


def bind_router(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> zmq.Socket[bytes]:
    import zmq

    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
    _common_options(sock)
    if endpoint.startswith("ipc://"):
        path = Path(endpoint.removeprefix("ipc://"))
        path.unlink(missing_ok=True)  # a stale socket file from a dead daemon
        old_umask = os.umask(0o177)  # the socket file is created 0600
        try:
            sock.bind(endpoint)
        finally:
            os.umask(old_umask)
    else:
        sock.bind(endpoint)
    return sock


def connect_dealer(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, identity: str
) -> zmq.Socket[bytes]:
    import zmq

    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity.encode())
    _common_options(sock)
    sock.connect(endpoint)
    return sock


def _common_options(sock: zmq.Socket[bytes]) -> None:
    import zmq

    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.MAXMSGSIZE, zmtp.MAX_READ_BYTES)
