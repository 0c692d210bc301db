"""The bench's own mirror of the envelope (`ipc/wire.py` shape), for the bare broker, the
bare agents and the driver. It does not import the product, so the baseline stays a baseline;
the product-specific payload bytes (a `Delegate`, a `DelegateResult`, `ready`) are made by
`bench/product.py` with the product's own codec and handed over as bytes, so both arms carry
frames of the same size.
"""

from __future__ import annotations

import msgspec


class Env(msgspec.Struct, omit_defaults=True, rename="camel"):
    type: str
    from_: str = msgspec.field(name="from")
    to: str = ""
    payload: msgspec.Raw = msgspec.Raw(b"\x80")
    correlation_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None


class ErrorHead(msgspec.Struct):
    code: str = ""
    message: str = ""


class ResultHead(msgspec.Struct):
    """The part of a `delegate_result` payload the bench reads."""

    status: str = ""
    error: ErrorHead | None = None


encoder = msgspec.msgpack.Encoder()
env_decoder = msgspec.msgpack.Decoder(Env)
result_decoder = msgspec.msgpack.Decoder(ResultHead)
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"  # a W3C-sized trace id, the same on every frame


def delegate(sender: str, target: str, payload: bytes, cid: str) -> bytes:
    return encoder.encode(
        Env("delegate", sender, target, msgspec.Raw(payload), cid, trace_id=TRACE_ID)
    )


def result_for(request: Env, sender: str, payload: bytes) -> bytes:
    return encoder.encode(
        Env(
            "delegate_result",
            sender,
            request.from_,
            msgspec.Raw(payload),
            request.correlation_id,
            trace_id=request.trace_id,
        )
    )
