"""ipc.zmtp.Reader against streams a peer could send: however a valid stream is split it reads
the same; garbage only ever raises zmtp.ProtocolError; a huge declared length is refused at
once, before anything is buffered for it."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from ipc import zmtp

FUZZ = settings(max_examples=200, deadline=None)

frames = st.lists(st.binary(max_size=300), min_size=1, max_size=5)
commands = st.tuples(
    st.sampled_from([b"PING", b"PONG", b"SUBSCRIBE", b"X"]), st.binary(max_size=300)
)
# What follows the greeting: messages and commands, in any order.
items = st.lists(st.one_of(frames, commands), max_size=12)


class Seen:
    def __init__(self) -> None:
        self.items: list[tuple[str, object]] = []
        self.reader = zmtp.Reader(self.message, self.command)

    def message(self, frames: list[bytes]) -> None:
        self.items.append(("message", list(frames)))

    def command(self, name: bytes, data: bytes) -> None:
        if name == b"READY":  # as the router and the dealer read it
            zmtp.properties(data)
        elif name == b"ERROR":
            raise zmtp.refusal(data)
        self.items.append(("command", (name, data)))


def encode(stream: list[list[bytes] | tuple[bytes, bytes]]) -> bytes:
    return zmtp.GREETING + b"".join(
        zmtp.command(*item) if isinstance(item, tuple) else zmtp.message(item) for item in stream
    )


def expected(stream: list[list[bytes] | tuple[bytes, bytes]]) -> list[tuple[str, object]]:
    return [("command", item) if isinstance(item, tuple) else ("message", item) for item in stream]


@FUZZ
@given(stream=items, data=st.data())
def test_any_split_of_a_valid_stream_reads_as_one_feed(stream, data):
    wire = encode(stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=20)))
    whole, split = Seen(), Seen()
    whole.reader.feed(wire)
    for start, end in zip([0, *cuts], [*cuts, len(wire)], strict=True):
        split.reader.feed(wire[start:end])
    assert whole.items == split.items == expected(stream)
    assert split.reader.buffered == 0


# Bytes that are almost frames, so the fuzzing reaches past the first length byte.
near_frames = st.builds(
    lambda flags, size, body: bytes((flags, size)) + body,
    st.integers(0, 255),
    st.integers(0, 255),
    st.binary(max_size=64),
)
near_commands = st.builds(
    lambda name, body: bytes((0x04, min(255, 1 + len(name) + len(body)), len(name))) + name + body,
    st.sampled_from([b"READY", b"ERROR", b"PING"]),
    st.binary(max_size=64),
)
garbage_chunks = st.one_of(st.binary(max_size=200), near_frames, near_commands)


@FUZZ
@given(garbage=st.lists(garbage_chunks, max_size=8), greeted=st.booleans())
def test_garbage_only_ever_raises_a_protocol_error(garbage, greeted):
    seen = Seen()
    chunks = [zmtp.GREETING, *garbage] if greeted else garbage
    try:
        for chunk in chunks:
            seen.reader.feed(chunk)
    except zmtp.ProtocolError:
        pass  # the only way a reader may refuse; any other exception fails the test


@FUZZ
@given(
    size=st.integers(zmtp.MAX_READ_BYTES + 1, (1 << 64) - 1),
    before=st.lists(st.binary(max_size=50), max_size=3),
    command=st.booleans(),
)
def test_a_huge_declared_length_is_refused_at_once_without_allocating(size, before, command):
    seen = Seen()
    flags = 0x06 if command else 0x02
    header = bytes((flags,)) + size.to_bytes(8, "big")
    wire = encode([[b] for b in before]) + header
    tracemalloc.start()
    try:
        try:
            seen.reader.feed(wire)
        except zmtp.ProtocolError as exc:
            assert "limit" in str(exc)
        else:
            raise AssertionError("a huge length was accepted")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # nothing the size of the declared frame
    assert seen.items == [("message", [b]) for b in before]
