"""A daemon whose sockets are attacked by a same-user process with plain sockets: it must keep
answering the CLI, never abort at its open-file limit, and serve again once the attack ends."""

from __future__ import annotations

import resource
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import zmq

from ipc import wire, zmtp
from tests.e2e.conftest import GOONDAN, QUICKSTART, Daemon, wait_for

OPEN_FILES = 1024  # systemd's default, soft and hard: `_raise_open_files_limit` cannot lift it
ATTACKERS = 1100  # more connections than the daemon may have files


class LimitedDaemon(Daemon):
    """`goondan run` of the quickstart with RLIMIT_NOFILE at OPEN_FILES, soft and hard."""

    def __init__(self, state_root: Path) -> None:
        self.state_root = state_root
        self.stderr_path = state_root / "daemon.stderr"
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [*GOONDAN, "run", str(QUICKSTART), "--state-root", str(state_root)],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            text=True,
            preexec_fn=_limit_open_files,
        )
        self.wait_ready()


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


@pytest.fixture
def daemon(state_root: Path) -> Iterator[LimitedDaemon]:
    started = LimitedDaemon(state_root)
    yield started
    started.stop()


@pytest.fixture
def many_files() -> Iterator[None]:
    """Room in this test process for the attacking connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 2 * ATTACKERS + soft)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def connect_many(path: Path, count: int, hello: bytes = b"") -> list[socket.socket]:
    """`count` connections to a unix socket, each sending `hello` (and never more)."""
    held: list[socket.socket] = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        try:
            sock.connect(str(path))
            if hello:
                sock.sendall(hello)
        except OSError:  # refused, or the backlog is full: the attack goes on regardless
            sock.close()
            continue
        held.append(sock)
    return held


def release(held: list[socket.socket]) -> None:
    for sock in held:
        sock.close()


def assert_serves(daemon: LimitedDaemon, instance: str) -> None:
    status = daemon.cli("status", "--json", timeout=30)
    assert status.returncode == 0, status.stderr + daemon.logs()
    answer = daemon.send("What is 2 plus 3?", "--instance", instance, timeout=45)
    assert answer.returncode == 0, answer.stderr + daemon.logs()
    assert answer.stdout.startswith("2 plus 3 is 5")
    assert daemon.proc.poll() is None


def test_connections_that_never_handshake_cannot_take_the_daemon_down(daemon, many_files):
    """Finding 1: at its file limit the daemon aborted (a libzmq assertion, exit 134) on the
    next control connection, and every agent died with it."""
    held = connect_many(daemon.state_root / "run" / "agents.sock", ATTACKERS)
    try:
        assert_serves(daemon, "during")
    finally:
        release(held)
    assert_serves(daemon, "after")
    logs = daemon.logs()
    assert "Assertion" not in logs and "Traceback" not in logs
    assert "64 connections in their handshake: the oldest dropped" in logs


def test_at_the_connection_cap_new_peers_are_refused_and_old_ones_served(daemon, many_files):
    """Peers that finish the handshake and idle hold a file each; past the cap the daemon
    refuses new connections (logged once, not per connection) and serves those it has."""
    control_sock = daemon.state_root / "run" / "control.sock"
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    client = ctx.socket(zmq.DEALER)  # a CLI that was connected before the flood
    client.connect(f"ipc://{control_sock}")
    try:
        assert control_status(client)["pid"] == daemon.proc.pid
        held: list[socket.socket] = []
        for i in range(ATTACKERS):
            hello = zmtp.GREETING + zmtp.ready(b"DEALER", f"intruder-{i}".encode())
            held += connect_many(control_sock, 1, hello)
        try:
            wait_for(lambda: "at the connection cap" in daemon.logs(), timeout=20)
            assert control_status(client)["pid"] == daemon.proc.pid
            assert daemon.logs().count("at the connection cap") == 1
        finally:
            release(held)
    finally:
        client.close(linger=0)
        ctx.term()
    assert_serves(daemon, "after")
    assert "Traceback" not in daemon.logs()


def control_status(client: zmq.Socket[bytes]) -> dict[str, Any]:
    """`status` over an open control connection, as the CLI asks it."""
    command = wire.control("status")
    client.send(wire.encode(wire.CONTROL, "cli", wire.ORCHESTRATOR, command, correlation_id="1"))
    assert client.poll(20_000), "no answer to status"
    reply = wire.decode_payload(wire.decode(client.recv()), wire.ControlReply)
    assert reply.ok, reply
    return cast(dict[str, Any], reply.result)


def test_an_oversized_control_request_drops_that_connection_and_is_logged(daemon):
    control_sock = daemon.state_root / "run" / "control.sock"
    header = b"\x02" + (zmtp.MAX_READ_BYTES + 1).to_bytes(8, "big")  # a frame too long
    [sock] = connect_many(control_sock, 1, zmtp.GREETING + zmtp.ready(b"DEALER", b"x") + header)
    try:
        sock.settimeout(10)
        while sock.recv(4096):  # the daemon's greeting and READY, then its close
            pass
    finally:
        sock.close()
    wait_for(lambda: "control.sock" in daemon.logs() and "byte limit" in daemon.logs())
    assert_serves(daemon, "after")


def test_peers_that_hold_partial_frames_are_bounded_and_the_daemon_serves(daemon):
    """Finding 7: 8 connections each holding 60 MB of a frame took the daemon to 1 GB."""
    agents_sock = daemon.state_root / "run" / "agents.sock"
    chunk = bytes(1 << 20)
    held: list[socket.socket] = []
    for i in range(8):
        hello = zmtp.GREETING + zmtp.ready(b"DEALER", f"hog-{i}".encode())
        [sock] = connect_many(agents_sock, 1, hello + b"\x02" + (64 << 20).to_bytes(8, "big"))
        held.append(sock)
        try:
            for _ in range(60):
                sock.sendall(chunk)
        except OSError:  # dropped: over the daemon's budget
            pass
    try:
        assert_serves(daemon, "during")
        rss_kib = _rss_kib(daemon.proc.pid)
        assert rss_kib < 300 * 1024, f"the daemon held {rss_kib} KiB at its peak"
    finally:
        release(held)
    assert_serves(daemon, "after")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):  # the peak, so a freed spike still counts
                return int(line.split()[1])
    raise AssertionError("no VmHWM")
