"""ipc.router_socket.RouterSocket against real libzmq DEALERs (with the options the orchestrator's
peers use) and our own Dealer: the peers must see an ordinary ROUTER, and nothing sent may be
lost or reordered."""

import asyncio
import gc
import os
import resource
import socket
import stat
import sys
import weakref
from collections.abc import AsyncIterator
from typing import NamedTuple

import pytest
import uvloop
import zmq

from ipc import zmtp
from ipc.dealer import Dealer
from ipc.endpoints import connect_dealer
from ipc.router_limits import DEFAULT_LIMITS, RouterLimits
from ipc.router_socket import RouterSocket, Unroutable
from tests.waiting import until


@pytest.fixture
def endpoint(directory) -> str:
    return f"ipc://{directory}/agents.sock"


class Listening(NamedTuple):
    router: RouterSocket
    got: list[list[bytes]]  # what it received, `[identity, *frames]` each


@pytest.fixture
async def listening(endpoint) -> AsyncIterator[Listening]:
    """A started router that keeps what it receives."""
    got: list[list[bytes]] = []
    router = RouterSocket(endpoint, got.append)
    router.start()
    yield Listening(router, got)
    router.close()


async def receive(sock: zmq.Socket[bytes], count: int = 1) -> list[list[bytes]]:
    """The next `count` messages a libzmq socket receives."""
    got: list[list[bytes]] = []

    def more() -> bool:
        while len(got) < count:
            try:
                got.append(sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return False
        return True

    await until(more)
    return got


async def test_ten_thousand_messages_each_way_in_order(endpoint, ctx):
    router_got: list[list[bytes]] = []

    def on_frames(frames: list[bytes]) -> None:
        router_got.append(frames)
        router.send([frames[0], b"re:" + frames[1]])  # answer from inside the read callback

    router = RouterSocket(endpoint, on_frames)
    router.start()
    dealer = connect_dealer(ctx, endpoint, "peer")
    try:
        count = 10_000
        for i in range(count):
            dealer.send(str(i).encode())
        dealer_got = await receive(dealer, count)
        assert router_got == [[b"peer", str(i).encode()] for i in range(count)]
        assert dealer_got == [[b"re:" + str(i).encode()] for i in range(count)]
    finally:
        dealer.close(0)
        router.close()


async def test_multipart_and_large_messages_both_ways(endpoint, listening, ctx):
    big = bytes(range(256)) * 4096  # 1 MiB
    router, got = listening
    dealer = connect_dealer(ctx, endpoint, "peer")
    try:
        dealer.send_multipart([b"head", b"", big])
        await until(lambda: got)
        assert got == [[b"peer", b"head", b"", big]]
        router.send([b"peer", big, b"tail"])
        assert await receive(dealer) == [[big, b"tail"]]
    finally:
        dealer.close(0)


async def test_an_unknown_or_departed_peer_is_unroutable(endpoint, listening, ctx):
    """ROUTER_MANDATORY: the caller learns at once that nobody will get the message."""
    router, got = listening
    with pytest.raises(Unroutable):
        router.send([b"nobody", b"hello"])
    dealer = connect_dealer(ctx, endpoint, "agent")
    try:
        dealer.send(b"here")
        await until(lambda: got)
        router.send([b"agent", b"fine"])
        dealer.close(0)  # the agent exits
        await until(lambda: router.peers == 0)
        with pytest.raises(Unroutable):
            router.send([b"agent", b"too late"])
    finally:
        dealer.close(0)


async def test_a_second_peer_with_the_same_identity_takes_over(endpoint, listening, ctx):
    """ROUTER_HANDOVER: a respawned agent gets the traffic for its name at once, and the old
    connection is closed."""
    router, got = listening
    reasons: list[str] = []
    old = Dealer(endpoint, "agent", lambda frames: None, on_disconnect=reasons.append)
    old.start()
    new = connect_dealer(ctx, endpoint, "agent")
    try:
        old.send([b"old"])
        await until(lambda: len(got) == 1)
        new.send(b"new")
        await until(lambda: len(got) == 2)
        router.send([b"agent", b"for the new one"])
        assert await receive(new) == [[b"for the new one"]]
        await until(lambda: reasons)  # the router closed the old connection
        assert got == [[b"agent", b"old"], [b"agent", b"new"]]
    finally:
        old.close()
        new.close(0)


async def test_a_peer_without_an_identity_gets_one_and_its_answers(endpoint, listening, ctx):
    router, got = listening
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    try:
        dealer.send(b"who am I")
        await until(lambda: got)
        [[identity, body]] = got
        assert body == b"who am I" and identity.startswith(b"\0") and len(identity) == 5
        router.send([identity, b"you are " + identity.hex().encode()])
        assert await receive(dealer) == [[b"you are " + identity.hex().encode()]]
    finally:
        dealer.close(0)


async def test_heartbeating_peers_stay_connected(endpoint, listening, ctx):
    """A DEALER with ZMTP heartbeats drops a ROUTER that does not answer its PINGs."""
    router, got = listening
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, b"agent")
    dealer.setsockopt(zmq.HEARTBEAT_IVL, 30)
    dealer.setsockopt(zmq.HEARTBEAT_TIMEOUT, 90)
    dealer.connect(endpoint)
    try:
        dealer.send(b"hello")
        await until(lambda: got)
        await asyncio.sleep(0.5)  # many heartbeat timeouts long
        router.send([b"agent", b"still there"])
        assert await receive(dealer) == [[b"still there"]]
        assert router.peers == 1
    finally:
        dealer.close(0)


async def test_a_peer_that_breaks_the_protocol_is_dropped_and_others_go_on(endpoint, ctx):
    errors: list[tuple[bytes | None, str]] = []
    got: list[list[bytes]] = []
    router = RouterSocket(endpoint, got.append, on_peer_error=lambda i, r: errors.append((i, r)))
    router.start()
    good = connect_dealer(ctx, endpoint, "good")
    loop = asyncio.get_running_loop()
    path = endpoint.removeprefix("ipc://")
    cases = [
        (b"GET / HTTP/1.1\r\n".ljust(64, b" "), "the peer does not speak ZMTP"),
        (zmtp.GREETING + zmtp.message([b"too soon"]), "a message before the handshake"),
        (zmtp.GREETING + b"\x04\x05\x09READY", "malformed command frame"),
        (zmtp.GREETING + zmtp.command(b"ERROR", b"\x0dbad mechanism"), "refused us: bad mechanism"),
        (zmtp.GREETING + b"\x02" + (1 << 62).to_bytes(8, "big"), "byte limit"),  # no buffering
    ]
    try:
        for data, reason in cases:
            bad = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            bad.setblocking(False)
            await loop.sock_connect(bad, path)
            await loop.sock_sendall(bad, data)
            # the default binds this iteration's value; mypy cannot type it
            await until(lambda reason=reason: any(reason in r for _, r in errors))  # type: ignore[misc]
            assert await loop.sock_recv(bad, 1024) is not None  # ours came; then it is closed
            bad.close()
        assert [i for i, _ in errors] == [None] * len(cases)
        good.send(b"unharmed")
        await until(lambda: got)
        assert got == [[b"good", b"unharmed"]]
    finally:
        good.close(0)
        router.close()


async def test_a_failing_handler_costs_the_peer_nothing(endpoint, ctx):
    got: list[list[bytes]] = []
    errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))

    def on_frames(frames: list[bytes]) -> None:
        if frames[1] == b"boom":
            raise RuntimeError("a bug in the handler")
        got.append(frames)

    router = RouterSocket(endpoint, on_frames)
    router.start()
    dealer = connect_dealer(ctx, endpoint, "agent")
    try:
        dealer.send(b"boom")
        dealer.send(b"after")
        await until(lambda: got)
        assert got == [[b"agent", b"after"]]
        assert [str(e["exception"]) for e in errors] == ["a bug in the handler"]
        router.send([b"agent", b"still connected"])
        assert await receive(dealer) == [[b"still connected"]]
    finally:
        dealer.close(0)
        router.close()


async def test_what_is_sent_before_close_is_still_delivered(endpoint, listening, ctx):
    """The daemon's last words (shutdown, final answers) go out although it closes at once."""
    router, got = listening
    dealer = connect_dealer(ctx, endpoint, "agent")
    try:
        dealer.send(b"hello")
        await until(lambda: got)
        for i in range(100):
            router.send([b"agent", str(i).encode()])
        assert await receive(dealer, 100) == [[str(i).encode()] for i in range(100)]
    finally:
        dealer.close(0)


async def test_the_socket_file_is_private_replaces_a_stale_one_and_goes_at_close(directory):
    path = directory / "agents.sock"
    path.write_bytes(b"a stale file from a dead daemon")
    router = RouterSocket(f"ipc://{path}", lambda frames: None)
    router.start()
    try:
        mode = os.stat(path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    finally:
        router.close()
    assert not path.exists()


async def test_our_dealer_sends_before_the_router_listens_and_nothing_is_lost(endpoint):
    dealer_got: list[list[bytes]] = []
    dealer = Dealer(endpoint, "early", dealer_got.append)
    dealer.start()
    for i in range(100):
        dealer.send([str(i).encode()])
    await asyncio.sleep(0.3)  # several connection attempts fail meanwhile
    got: list[list[bytes]] = []

    def on_frames(frames: list[bytes]) -> None:
        got.append(frames)
        router.send([frames[0], b"ok " + frames[1]])

    router = RouterSocket(endpoint, on_frames)
    router.start()
    try:
        await until(lambda: len(dealer_got) == 100)
        assert got == [[b"early", str(i).encode()] for i in range(100)]
        assert dealer_got == [[b"ok " + str(i).encode()] for i in range(100)]
    finally:
        dealer.close()
        router.close()


async def test_a_message_over_the_limit_is_refused_to_its_sender_and_nothing_else_is(endpoint):
    """Sent, it would make the reader drop the connection with every message behind it."""
    got: list[list[bytes]] = []
    router = RouterSocket(endpoint, got.append)
    router.start()
    dealer_got: list[list[bytes]] = []
    dealer = Dealer(endpoint, "peer", dealer_got.append)
    dealer.start()
    huge = bytes(zmtp.MAX_MESSAGE_BYTES)
    try:
        dealer.send([b"before"])
        await until(lambda: got)
        with pytest.raises(zmtp.MessageTooLarge, match="over the 67,108,864-byte limit"):
            dealer.send([huge])
        with pytest.raises(zmtp.MessageTooLarge, match="over the 67,174,400-byte limit"):
            router.send([b"peer", huge + bytes(64 * 1024)])
        dealer.send([b"after"])
        router.send([b"peer", b"still connected"])
        await until(lambda: len(got) == 2 and dealer_got)
        assert got == [[b"peer", b"before"], [b"peer", b"after"]]
        assert dealer_got == [[b"still connected"]]
    finally:
        dealer.close()
        router.close()


def test_only_ipc_endpoints_are_accepted():
    with pytest.raises(ValueError, match="ipc://"):
        RouterSocket("tcp://127.0.0.1:5555", lambda frames: None)


async def test_admit_refuses_a_peer_before_it_is_routable(endpoint: str) -> None:
    seen: list[tuple[bytes, dict[bytes, bytes]]] = []
    errors: list[tuple[bytes | None, str]] = []

    def admit(identity: bytes, properties: dict[bytes, bytes]) -> str | None:
        seen.append((identity, properties))
        return None if properties.get(b"X-Token") == b"good" else "bad token"

    router = RouterSocket(
        endpoint,
        lambda frames: None,
        admit=admit,
        on_peer_error=lambda identity, reason: errors.append((identity, reason)),
    )
    router.start()
    reasons: list[str] = []
    intruder = Dealer(
        endpoint,
        "agent",
        lambda f: None,
        properties={b"X-Token": b"bad"},
        on_disconnect=reasons.append,
    )
    intruder.start()
    intruder.send([b"forged"])
    await until(lambda: reasons)
    intruder.close()  # else it reconnects, as a DEALER does
    assert "bad token" in reasons[0]
    assert errors[0] == (b"agent", "refused: bad token")
    with pytest.raises(Unroutable):
        router.send([b"agent", b"x"])
    got: list[list[bytes]] = []
    agent = Dealer(endpoint, "agent", got.append, properties={b"X-Token": b"good"})
    agent.start()
    await until(lambda: router.peers == 1)
    router.send([b"agent", b"hello"])
    await until(lambda: got)
    assert got == [[b"hello"]]
    assert (seen[0][1][b"X-Token"], seen[-1][1][b"X-Token"]) == (b"bad", b"good")
    agent.close()
    router.close()


# -- what a hostile peer can take (issue 25, findings 1 and 7) ---------------------------------
# Each scenario runs on asyncio's loop and on uvloop, the daemon's.

LOOPS = pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])


async def raw_connection(path: str, data: bytes = b"") -> socket.socket:
    """A plain unix socket connection that sends `data`, and nothing else by itself."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    await loop.sock_connect(sock, path)
    if data:
        await loop.sock_sendall(sock, data)
    return sock


async def closed_by_peer(sock: socket.socket) -> bytes:
    """Everything the router wrote to `sock` until it closed the connection (a reset, if
    what we sent was unread)."""
    loop = asyncio.get_running_loop()
    got = b""
    try:
        while chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), 10):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def hello(identity: bytes) -> bytes:
    return zmtp.GREETING + zmtp.ready(b"DEALER", identity)


def long_frame_header(size: int) -> bytes:
    return b"\x02" + size.to_bytes(8, "big")


class Reported(list[tuple[bytes | None, str]]):
    def mentions(self, text: str) -> int:
        return sum(text in reason for _, reason in self)

    def add(self, identity: bytes | None, reason: str) -> None:
        self.append((identity, reason))


@LOOPS
def test_incomplete_messages_of_all_connections_stay_within_a_budget(run, endpoint):
    """Finding 7: eight connections each holding 60 MB of a frame took the daemon to 1 GB. The
    bytes held for incomplete messages are counted across connections; the connection whose
    read would pass the budget is dropped, and a well-behaved peer still gets through."""
    path = endpoint.removeprefix("ipc://")
    budget = 1 << 20
    part = 400 * 1024

    async def scenario() -> None:
        got: list[list[bytes]] = []
        reported = Reported()
        router = RouterSocket(
            endpoint,
            got.append,
            on_peer_error=reported.add,
            limits=RouterLimits(max_buffered_bytes=budget),
        )
        router.start()
        hogs: list[socket.socket] = []
        try:
            for i in range(2):
                start = hello(b"hog-%d" % i) + long_frame_header(budget)
                hogs.append(await raw_connection(path, start + bytes(part)))
                held = (i + 1) * (9 + part)  # each: a frame's header and what came of it
                # the default binds this iteration's value; mypy cannot type it
                await until(lambda held=held: router.buffered_bytes == held)  # type: ignore[misc]
            third = await raw_connection(path, hello(b"hog-2") + long_frame_header(budget))
            await asyncio.get_running_loop().sock_sendall(third, bytes(part))
            await closed_by_peer(third)  # dropped: it would pass the budget
            third.close()
            await until(lambda: router.buffered_bytes == 2 * (9 + part))
            assert reported.mentions("-byte budget of all connections") == 1
            assert [i for i, r in reported] == [b"hog-2"]
            good = Dealer(endpoint, "good", lambda frames: None)
            good.start()
            good.send([b"small", bytes(100 * 1024)])  # a large message within the budget
            await until(lambda: got)
            assert got == [[b"good", b"small", bytes(100 * 1024)]]
            good.close()
            hogs.pop().close()
            await until(lambda: router.buffered_bytes == 9 + part)  # given back at close
        finally:
            for hog in hogs:
                hog.close()
            router.close()

    run(scenario())


@LOOPS
def test_a_closed_connection_is_freed_without_a_garbage_collection(run, endpoint):
    """Finding 7: the memory of a closed connection stayed until a collection, as its reader
    and the connection referred to each other."""
    path = endpoint.removeprefix("ipc://")

    async def scenario() -> None:
        router = RouterSocket(endpoint, lambda frames: None)
        router.start()
        partial = zmtp.message([b"x"] * 100 + [bytes(300_000)])[:-1000]  # frames and a part
        sock = await raw_connection(path, hello(b"peer") + partial)
        try:
            await until(lambda: router.buffered_bytes > 300_000)
            [peer] = router._connections
            freed = weakref.ref(peer)
            del peer
            sock.close()
            await until(lambda: router.connections == 0)
            for _ in range(3):  # connection_lost's own callbacks
                await asyncio.sleep(0)
            assert freed() is None
            assert router.buffered_bytes == 0
        finally:
            router.close()

    gc.collect()
    gc.disable()
    try:
        run(scenario())
    finally:
        gc.enable()


@LOOPS
def test_a_connection_without_a_handshake_is_dropped_at_its_deadline(run, endpoint):
    path = endpoint.removeprefix("ipc://")

    async def scenario() -> None:
        reported = Reported()
        router = RouterSocket(
            endpoint,
            lambda frames: None,
            on_peer_error=reported.add,
            limits=RouterLimits(handshake_timeout_s=0.2),
        )
        router.start()
        try:
            silent = await raw_connection(path)
            half = await raw_connection(path, zmtp.GREETING)  # a greeting, then nothing
            for sock in (silent, half):
                assert await closed_by_peer(sock) == zmtp.GREETING + zmtp.ready(b"ROUTER")
                sock.close()
            await until(lambda: router.connections == 0)
            assert reported == [(None, "no handshake within 0.2 s: connection dropped")]
        finally:
            router.close()

    run(scenario())


@LOOPS
def test_connections_in_their_handshake_are_capped_and_the_oldest_make_room(run, endpoint):
    path = endpoint.removeprefix("ipc://")

    async def scenario() -> None:
        reported = Reported()
        router = RouterSocket(
            endpoint,
            lambda frames: None,
            on_peer_error=reported.add,
            limits=RouterLimits(max_handshaking=4),
        )
        router.start()
        stalled = [await raw_connection(path) for _ in range(4)]
        try:
            await until(lambda: router.connections == 4)
            await asyncio.sleep(DEFAULT_LIMITS.handshake_grace_s)  # before it, nobody is pushed out
            agent_got: list[list[bytes]] = []
            agent = Dealer(endpoint, "agent", agent_got.append)
            agent.start()
            await until(lambda: router.peers == 1)  # the oldest stalled one made room
            await closed_by_peer(stalled[0])
            assert router.connections == 4
            router.send([b"agent", b"welcome"])
            await until(lambda: agent_got == [[b"welcome"]])
            agent.close()
            assert reported.mentions("4 connections in their handshake: the oldest dropped") == 1
        finally:
            for sock in stalled:
                sock.close()
            router.close()

    run(scenario())


@LOOPS
def test_past_the_connection_cap_new_ones_are_refused_and_old_ones_served(run, endpoint, ctx):
    path = endpoint.removeprefix("ipc://")

    async def scenario() -> None:
        got: list[list[bytes]] = []
        reported = Reported()
        router = RouterSocket(endpoint, got.append, on_peer_error=reported.add, max_connections=3)
        router.start()
        agent = connect_dealer(ctx, endpoint, "agent")
        others = [await raw_connection(path, hello(b"idle-%d" % i)) for i in range(2)]
        try:
            await until(lambda: router.peers == 3)
            refused = [await raw_connection(path, hello(b"late-%d" % i)) for i in range(10)]
            for sock in refused:
                assert await closed_by_peer(sock) == b""  # closed before a word
                sock.close()
            assert reported == [
                (None, "at the connection cap (3): a new connection refused (closed at once)")
            ]
            agent.send(b"still served")
            await until(lambda: got)
            assert got == [[b"agent", b"still served"]] and router.peers == 3
        finally:
            agent.close(0)
            for sock in others:
                sock.close()
            router.close()

    run(scenario())


# A router on uvloop, as in the daemon, in a process with few descriptors: `fill` takes all it
# has left, `free` gives them back; it prints what it reports.
OUT_OF_FILES_ROUTER = """
import asyncio, os, sys, uvloop
from ipc.router_socket import RouterSocket

async def main():
    hogs = []
    def on_frames(frames):
        if frames[1] == b"fill":
            try:
                while True:
                    hogs.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
        elif frames[1] == b"free":
            while hogs:
                os.close(hogs.pop())
        router.send(frames)  # the echo
    router = RouterSocket(sys.argv[1], on_frames, on_peer_error=lambda i, r: print(r, flush=True))
    router.start()
    print("listening", flush=True)
    await asyncio.Event().wait()

uvloop.run(main())
"""


async def test_out_of_descriptors_the_router_pauses_accepting_and_serves_the_rest(endpoint):
    """Finding 1: at the open-file limit the daemon aborted. Now new connections wait, the
    ones it has are served, it says so once, and accepts again when descriptors are free."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        OUT_OF_FILES_ROUTER,
        endpoint,
        stdout=asyncio.subprocess.PIPE,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)),
    )
    assert child.stdout is not None
    first_got: list[list[bytes]] = []
    second_got: list[list[bytes]] = []
    first = Dealer(endpoint, "first", first_got.append)
    second = Dealer(endpoint, "second", second_got.append)
    try:
        assert await child.stdout.readline() == b"listening\n"
        first.start()
        first.send([b"fill"])
        await until(lambda: first_got == [[b"fill"]])
        second.start()
        second.send([b"hello"])
        line = await asyncio.wait_for(child.stdout.readline(), 10)
        assert line.startswith(b"cannot accept a connection (Too many open files)"), line
        first.send([b"still served"])
        await until(lambda: len(first_got) == 2)
        assert first_got[1] == [b"still served"] and not second_got
        first.send([b"free"])
        await until(lambda: second_got == [[b"hello"]])
    finally:
        first.close()
        second.close()
        child.kill()
        rest = await child.stdout.read()
        await child.wait()
    assert b"cannot accept" not in rest  # retried, yet reported once


@LOOPS
def test_a_peer_that_pings_and_never_reads_costs_bounded_memory(run, endpoint):
    """A PONG echoes its PING's context: a peer that sent large PINGs and read nothing grew our
    write buffer without end."""
    path = endpoint.removeprefix("ipc://")

    async def scenario() -> None:
        got: list[list[bytes]] = []
        router = RouterSocket(endpoint, got.append)
        router.start()
        pings = zmtp.command(b"PING", b"\0\0" + bytes(200)) * 20_000  # 4 MB of context
        sock = await raw_connection(path, hello(b"pinger") + pings + zmtp.message([b"done"]))
        try:
            await until(lambda: got)
            [peer] = router._connections
            assert peer.transport.get_write_buffer_size() < DEFAULT_LIMITS.pong_unread_bytes + 1024
        finally:
            sock.close()
            router.close()

    run(scenario())


async def test_peer_uid_is_the_kernels_word(listening, endpoint, ctx):
    """`approve` / `deny` record who decided from the connection itself (SO_PEERCRED)."""
    dealer = connect_dealer(ctx, endpoint, "cli-1")
    try:
        dealer.send(b"hello")
        await until(lambda: len(listening.got) == 1)
        assert listening.router.peer_uid(b"cli-1") == os.getuid()
        assert listening.router.peer_uid(b"nobody") is None
    finally:
        dealer.close(linger=0)
