import msgspec
import pytest

from ipc import wire


def test_envelope_round_trip_keeps_header_and_payload():
    payload = wire.Delegate(
        input="hi",
        instance_key="k1",
        source=wire.Source("agent", "a"),
        call_chain=("cli", "a"),
        timeout_ms=500,
    )
    frame = wire.encode(wire.DELEGATE, "a", "b", payload, correlation_id="7", trace_id="t" * 32)
    env = wire.decode(frame)
    assert (env.type, env.from_, env.to, env.correlation_id) == ("delegate", "a", "b", "7")
    assert env.trace_id == "t" * 32
    assert wire.decode_payload(env, wire.Delegate) == payload


def test_wire_field_names_are_camel_case():
    frame = wire.encode(
        wire.DELEGATE_RESULT,
        "b",
        "a",
        wire.DelegateResult("ok", "b", "x", instance_key="k"),
        correlation_id="1",
    )
    raw = msgspec.msgpack.decode(frame)
    assert set(raw) == {"type", "from", "to", "payload", "correlationId"}


def test_routing_view_reads_only_what_the_broker_needs():
    payload = wire.Delegate(
        "x", "k", wire.Source("cli", "send"), call_chain=("a", "b"), timeout_ms=9
    )
    env = wire.decode(wire.encode(wire.DELEGATE, "b", "c", payload))
    routing = wire.decode_payload(env, wire.DelegateRouting)
    assert routing.call_chain == ("a", "b")
    assert routing.timeout_ms == 9


@pytest.mark.parametrize(
    "frame", [b"", b"\xc1", b"not msgpack at all", msgspec.msgpack.encode([1, 2])]
)
def test_malformed_frames_raise_one_error_type(frame):
    with pytest.raises(wire.MalformedFrame):
        wire.decode(frame)


def test_payload_of_the_wrong_shape_is_malformed():
    env = wire.decode(wire.encode(wire.DELEGATE, "a", "b", wire.Empty()))
    with pytest.raises(wire.MalformedFrame, match="delegate payload from 'a'"):
        wire.decode_payload(env, wire.Delegate)
