"""ipc.Channel over real ZeroMQ sockets: nothing lost, order kept, even past the high-water mark."""

import asyncio

import zmq

from ipc.channel import Channel
from ipc.endpoints import bind_router, connect_dealer


async def test_ten_thousand_messages_each_way_in_order(directory):
    endpoint = f"ipc://{directory}/c.sock"
    ctx = zmq.Context()
    router_got: list[bytes] = []
    dealer_got: list[bytes] = []
    done = asyncio.Event()
    count = 10_000

    def on_router(frames: list[bytes]) -> None:
        identity, body = frames
        router_got.append(body)
        router.send([identity, b"re:" + body])  # answer from inside the read callback

    def on_dealer(frames: list[bytes]) -> None:
        dealer_got.append(frames[0])
        if len(dealer_got) == count:
            done.set()

    router = Channel(bind_router(ctx, endpoint), on_router)
    dealer = Channel(connect_dealer(ctx, endpoint, "peer"), on_dealer)
    router.start()
    dealer.start()
    try:
        for i in range(count):
            dealer.send([str(i).encode()])
        await asyncio.wait_for(done.wait(), 20)
        assert router_got == [str(i).encode() for i in range(count)]
        assert dealer_got == [b"re:" + str(i).encode() for i in range(count)]
    finally:
        router.close()
        dealer.close()
        ctx.term()


async def test_a_full_peer_queue_waits_in_the_outbox_then_drains(directory):
    endpoint = f"ipc://{directory}/c.sock"
    ctx = zmq.Context()
    received: list[bytes] = []
    sock = connect_dealer(ctx, endpoint, "slow")
    sock.setsockopt(zmq.SNDHWM, 10)  # tiny queue: sends will hit it before the peer binds
    dealer = Channel(sock, lambda frames: None)
    dealer.start()
    for i in range(500):
        dealer.send([str(i).encode()])
    assert dealer.pending_sends > 0  # nobody listens yet: the outbox holds the rest, in order
    router = Channel(bind_router(ctx, endpoint), lambda frames: received.append(frames[1]))
    router.start()
    try:
        for _ in range(400):
            if len(received) == 500:
                break
            await asyncio.sleep(0.01)
        assert received == [str(i).encode() for i in range(500)]
        assert dealer.pending_sends == 0
    finally:
        router.close()
        dealer.close()
        ctx.term()


async def test_a_message_of_several_parts_arrives_whole_and_alone(directory):
    endpoint = f"ipc://{directory}/c.sock"
    ctx = zmq.Context()
    router_got: list[list[bytes]] = []
    dealer_got: list[list[bytes]] = []
    router = Channel(bind_router(ctx, endpoint), router_got.append)
    dealer = Channel(connect_dealer(ctx, endpoint, "peer"), dealer_got.append)
    router.start()
    dealer.start()
    try:
        dealer.send([b"a", b"b", b"c"])
        dealer.send([b"single"])
        for _ in range(200):
            if len(router_got) == 2:
                break
            await asyncio.sleep(0.01)
        assert router_got == [[b"peer", b"a", b"b", b"c"], [b"peer", b"single"]]
        router.send([b"peer", b"x", b"y"])  # a ROUTER's reply: identity, then two parts
        router.send([b"peer", b"z"])
        for _ in range(200):
            if len(dealer_got) == 2:
                break
            await asyncio.sleep(0.01)
        assert dealer_got == [[b"x", b"y"], [b"z"]]
    finally:
        router.close()
        dealer.close()
        ctx.term()
