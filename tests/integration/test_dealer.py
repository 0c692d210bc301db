"""ipc.dealer.Dealer against a real libzmq ROUTER (the orchestrator's options): the ROUTER must
see an ordinary DEALER, and nothing sent may be lost or reordered across (re)connections."""

import asyncio
import socket
from collections.abc import Iterator

import pytest
import zmq

from ipc import zmtp
from ipc.channel import Channel
from ipc.dealer import Dealer
from ipc.endpoints import bind_router
from tests.waiting import until


async def test_ten_thousand_messages_each_way_in_order(directory, ctx):
    endpoint = f"ipc://{directory}/r.sock"
    router_got: list[list[bytes]] = []
    dealer_got: list[list[bytes]] = []

    def on_router(frames: list[bytes]) -> None:
        router_got.append(frames)
        router.send([frames[0], b"re:" + frames[1]])  # answer from inside the read callback

    router = Channel(bind_router(ctx, endpoint), on_router)
    router.start()
    dealer = Dealer(endpoint, "peer", dealer_got.append)
    dealer.start()
    try:
        count = 10_000
        for i in range(count):
            dealer.send([str(i).encode()])
        await until(lambda: len(dealer_got) == count)
        assert router_got == [[b"peer", str(i).encode()] for i in range(count)]
        assert dealer_got == [[b"re:" + str(i).encode()] for i in range(count)]
    finally:
        dealer.close()
        router.close()


async def test_multipart_and_large_messages_both_ways(directory, ctx):
    endpoint = f"ipc://{directory}/r.sock"
    big = bytes(range(256)) * 4096  # 1 MiB
    router_got: list[list[bytes]] = []
    dealer_got: list[list[bytes]] = []
    router = Channel(bind_router(ctx, endpoint), router_got.append)
    router.start()
    dealer = Dealer(endpoint, "peer", dealer_got.append)
    dealer.start()
    try:
        dealer.send([b"head", b"", big])
        await until(lambda: router_got)
        assert router_got == [[b"peer", b"head", b"", big]]
        router.send([b"peer", big, b"tail"])
        await until(lambda: dealer_got)
        assert dealer_got == [[big, b"tail"]]
    finally:
        dealer.close()
        router.close()


async def test_what_is_sent_before_the_router_listens_arrives_in_order(directory, ctx):
    endpoint = f"ipc://{directory}/r.sock"
    dealer = Dealer(endpoint, "early", lambda frames: None)
    dealer.start()
    for i in range(100):
        dealer.send([str(i).encode()])
    await asyncio.sleep(0.3)  # several connection attempts fail meanwhile
    assert dealer.pending_bytes > 0
    got: list[list[bytes]] = []
    router = Channel(bind_router(ctx, endpoint), got.append)
    router.start()
    try:
        await until(lambda: len(got) == 100)
        assert got == [[b"early", str(i).encode()] for i in range(100)]
        assert await dealer.flush(1.0)
    finally:
        dealer.close()
        router.close()


async def test_it_reconnects_when_the_router_comes_back(directory, ctx):
    endpoint = f"ipc://{directory}/r.sock"
    reasons: list[str] = []
    dealer_got: list[list[bytes]] = []
    dealer = Dealer(endpoint, "agent", dealer_got.append, on_disconnect=reasons.append)
    first: list[list[bytes]] = []
    router = Channel(bind_router(ctx, endpoint), first.append)
    router.start()
    dealer.start()
    try:
        dealer.send([b"one"])
        await until(lambda: first)
        router.close()  # the orchestrator's socket goes away
        await until(lambda: reasons)
        dealer.send([b"two"])  # held until the next handshake
        second: list[list[bytes]] = []
        router = Channel(bind_router(ctx, endpoint), second.append)
        router.start()
        await until(lambda: second)
        assert second == [[b"agent", b"two"]]
        router.send([b"agent", b"back"])  # routable again under the same identity
        await until(lambda: dealer_got)
        assert dealer_got == [[b"back"]]
        assert "closed the connection" in reasons[0]
    finally:
        dealer.close()
        router.close()


async def test_a_second_dealer_with_the_same_identity_takes_over(directory, ctx):
    """ROUTER_HANDOVER: a respawned agent gets the traffic for its name."""
    endpoint = f"ipc://{directory}/r.sock"
    got: list[list[bytes]] = []
    router = Channel(bind_router(ctx, endpoint), got.append)
    router.start()
    old_got: list[list[bytes]] = []
    new_got: list[list[bytes]] = []
    old = Dealer(endpoint, "agent", old_got.append)
    old.start()
    try:
        old.send([b"old"])
        await until(lambda: len(got) == 1)
        new = Dealer(endpoint, "agent", new_got.append)
        new.start()
        new.send([b"new"])
        await until(lambda: len(got) == 2)
        old.close()  # as a respawn kills the old process
        router.send([b"agent", b"for the new one"])
        await until(lambda: new_got)
        assert new_got == [[b"for the new one"]]
        assert old_got == []
        new.close()
    finally:
        old.close()
        router.close()


async def test_router_heartbeats_are_answered(directory, ctx):
    """A ROUTER with ZMTP heartbeats drops a peer that does not answer its PINGs."""
    endpoint = f"ipc://{directory}/r.sock"
    sock = bind_router(ctx, endpoint)
    sock.setsockopt(zmq.HEARTBEAT_IVL, 30)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 90)
    got: list[list[bytes]] = []
    router = Channel(sock, got.append)
    router.start()
    reasons: list[str] = []
    dealer_got: list[list[bytes]] = []
    dealer = Dealer(endpoint, "agent", dealer_got.append, on_disconnect=reasons.append)
    dealer.start()
    try:
        dealer.send([b"hello"])
        await until(lambda: got)
        await asyncio.sleep(0.5)  # many heartbeat timeouts long
        router.send([b"agent", b"still there"])
        await until(lambda: dealer_got)
        assert reasons == []
    finally:
        dealer.close()
        router.close()


@pytest.fixture
def raw_server(directory) -> Iterator[tuple[str, socket.socket]]:
    """A plain unix socket listening where a Dealer connects: a peer that is not libzmq."""
    path = directory / "raw.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    server.setblocking(False)
    yield f"ipc://{path}", server
    server.close()


async def test_a_peer_that_breaks_the_protocol_is_left_and_retried(raw_server):
    """Not a ZMTP peer: the connection is dropped with the reason, and the Dealer tries again."""
    endpoint, server = raw_server
    loop = asyncio.get_running_loop()
    reasons: list[str] = []
    dealer = Dealer(endpoint, "agent", lambda frames: None, on_disconnect=reasons.append)
    dealer.start()
    try:
        for attempt in (1, 2):  # the first connection, then the retry
            conn, _ = await loop.sock_accept(server)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n".ljust(64, b" "))
            # the default binds this iteration's value; mypy cannot type it
            await until(lambda attempt=attempt: len(reasons) == attempt)  # type: ignore[misc]
            conn.close()
        assert all("ZMTP protocol error: the peer does not speak ZMTP" in r for r in reasons)
    finally:
        dealer.close()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (zmtp.message([b"too soon"]), "a message before the handshake"),
        (zmtp.command(b"ERROR", b"\x0dbad mechanism"), "the peer refused us: bad mechanism"),
    ],
)
async def test_a_peer_that_breaks_off_the_handshake_is_left_with_the_reason(
    raw_server, data, reason
):
    endpoint, server = raw_server
    loop = asyncio.get_running_loop()
    reasons: list[str] = []
    got: list[list[bytes]] = []
    dealer = Dealer(endpoint, "agent", got.append, on_disconnect=reasons.append)
    dealer.start()
    try:
        conn, _ = await loop.sock_accept(server)
        conn.sendall(zmtp.GREETING + data)
        await until(lambda: reasons)
        conn.close()
        assert got == []
        assert reason in reasons[0]
    finally:
        dealer.close()


def test_only_ipc_endpoints_are_accepted():
    with pytest.raises(ValueError, match="ipc://"):
        Dealer("tcp://127.0.0.1:5555", "agent", lambda frames: None)
