"""ipc.zmtp: what a DEALER sends, and reading a peer's bytes however the stream splits them."""

import sys
from typing import cast

import pytest

from ipc import zmtp


def read_all(chunks: list[bytes], max_bytes: int = zmtp.MAX_READ_BYTES) -> list[tuple[str, object]]:
    seen: list[tuple[str, object]] = []
    reader = zmtp.Reader(
        lambda frames: seen.append(("message", frames)),
        lambda name, data: seen.append(("command", (name, data))),
        max_bytes,
    )
    for chunk in chunks:
        reader.feed(chunk)
    return seen


STREAM = (
    zmtp.GREETING
    + zmtp.ready(b"ROUTER", b"")
    + zmtp.message([b"short"])
    + zmtp.message([b"x" * 300])  # a long frame: 8-byte size
    + zmtp.message([b"a", b"", b"y" * 70_000, b"z"])  # multipart, long and empty parts
    + zmtp.command(b"PING", b"\x00\x0aping-ctx")
)


def test_a_stream_reads_the_same_however_it_is_split():
    whole = read_all([STREAM])
    assert [kind for kind, _ in whole] == ["command", "message", "message", "message", "command"]
    assert whole[1] == ("message", [b"short"])
    assert whole[2] == ("message", [b"x" * 300])
    assert whole[3] == ("message", [b"a", b"", b"y" * 70_000, b"z"])
    assert whole[4] == ("command", (b"PING", b"\x00\x0aping-ctx"))
    name, data = cast(tuple[bytes, bytes], whole[0][1])
    assert name == b"READY"
    assert zmtp.properties(data) == {b"Socket-Type": b"ROUTER", b"Identity": b""}
    assert read_all([bytes([b]) for b in STREAM]) == whole  # one byte at a time
    for cut in (1, 10, 63, 64, 65, 70, 200, 500):
        assert read_all([STREAM[:cut], STREAM[cut:]]) == whole


def test_ready_carries_the_socket_type_and_identity():
    body = zmtp.ready(b"DEALER", b"agent-7")
    seen = read_all([zmtp.GREETING, body])
    assert seen[0][0] == "command"
    name, data = cast(tuple[bytes, bytes], seen[0][1])
    assert (name, zmtp.properties(data)) == (
        b"READY",
        {b"Socket-Type": b"DEALER", b"Identity": b"agent-7"},
    )


def test_pong_echoes_the_ping_context():
    assert zmtp.pong(b"\x00\x0actx") == zmtp.command(b"PONG", b"ctx")


@pytest.mark.parametrize(
    ("greeting", "says"),
    [
        (b"GET / HTTP/1.1\r\n".ljust(64, b" "), "does not speak ZMTP"),
        (zmtp.GREETING[:10] + b"\x02\x00" + zmtp.GREETING[12:], "ZMTP 2.x"),
        (zmtp.GREETING[:12] + b"CURVE".ljust(20, b"\0") + zmtp.GREETING[32:], "CURVE mechanism"),
    ],
)
def test_a_peer_that_is_not_a_zmtp3_null_peer_is_refused(greeting, says):
    with pytest.raises(zmtp.ProtocolError, match=says):
        read_all([greeting])


def test_a_malformed_command_is_refused():
    with pytest.raises(zmtp.ProtocolError, match="malformed command"):
        read_all([zmtp.GREETING + b"\x04\x03\x09ab"])  # name length 9 in a 3-byte body


def test_a_truncated_ready_property_is_refused():
    with pytest.raises(zmtp.ProtocolError, match="truncated"):
        zmtp.properties(b"\x08Identity\x00\x00\x00\x09abc")


def test_a_frame_over_the_limit_is_refused_as_soon_as_its_length_is_read():
    at_limit = zmtp.GREETING + zmtp.message([b"x" * 1000])
    assert read_all([at_limit], max_bytes=1000) == [("message", [b"x" * 1000])]
    with pytest.raises(zmtp.ProtocolError, match="1,001 bytes or more is over the 1,000-byte"):
        read_all([zmtp.GREETING + zmtp.message([b"x" * 1001])[:9]], max_bytes=1000)
    # a garbage length: refused with no body sent, nothing buffered for it
    with pytest.raises(zmtp.ProtocolError, match="over the 67,174,400-byte limit"):
        read_all([zmtp.GREETING + b"\x02" + (1 << 62).to_bytes(8, "big")])


def test_a_message_of_many_short_frames_counts_them_together():
    parts = [b"y" * 200] * 5
    held = 4 * (200 + zmtp.FRAME_OVERHEAD) + 200  # the earlier frames as held in memory
    with pytest.raises(zmtp.ProtocolError, match=f"{held:,} bytes or more"):
        read_all([zmtp.GREETING + zmtp.message(parts)], max_bytes=held - 1)
    seen = read_all([zmtp.GREETING + zmtp.message(parts) * 3], max_bytes=held)
    assert seen == [("message", parts)] * 3  # each message counted from zero


def test_tiny_frames_are_counted_at_what_they_cost_in_memory():
    """Finding 7: a message of 1-byte frames took 13 times its size; its frames are counted
    with their overhead, so such a message is refused long before memory runs out."""
    tiny = [b"z"] * 1000
    limit = 100 * (1 + zmtp.FRAME_OVERHEAD)
    with pytest.raises(zmtp.ProtocolError, match="over the"):
        read_all([zmtp.GREETING + zmtp.message(tiny)], max_bytes=limit)
    assert zmtp.FRAME_OVERHEAD >= sys.getsizeof(b"z") - 1 + 8  # a bytes object and a list slot


def test_buffered_is_what_an_incomplete_message_holds():
    reader = zmtp.Reader(lambda frames: None, lambda name, data: None)
    message = zmtp.message([b"a" * 10, b"b" * 300])
    reader.feed(zmtp.GREETING + message[:-100])
    assert reader.buffered == (10 + zmtp.FRAME_OVERHEAD) + (9 + 200)  # a frame, and a part
    reader.feed(message[-100:])
    assert reader.buffered == 0


def test_a_sender_is_told_before_it_sends_too_much():
    assert zmtp.check_size(b"x" * 10, 10) == b"x" * 10
    with pytest.raises(zmtp.MessageTooLarge, match="11 bytes is over the 10-byte limit"):
        zmtp.check_size(b"x" * 11, 10)
