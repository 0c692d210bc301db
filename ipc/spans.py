"""Finished spans as agents hand them to the orchestrator, which exports them over OTLP.

An agent does not load the OpenTelemetry SDK: when a span ends it sends a `SpanRecord` batch
(a 4-byte big-endian length, then the msgpack list) on its connection to the orchestrator's
span socket (`GOONDAN_SPAN_SOCKET`, unix stream), and the orchestrator turns it into an SDK
span with the same ids and times (docs/tracing.md).
"""

from __future__ import annotations

from typing import Final

import msgspec

KIND_INTERNAL: Final = 0  # the values of `opentelemetry.trace.SpanKind`
KIND_SERVER: Final = 1
KIND_CLIENT: Final = 2

Attribute = str | bool | int | float | list[str]


class SpanRecord(msgspec.Struct, array_like=True, frozen=True):
    name: str
    trace_id: str  # 32 hex
    span_id: str  # 16 hex
    parent_span_id: str | None
    start_ns: int  # time.time_ns()
    end_ns: int
    kind: int = KIND_INTERNAL
    error: str | None = None  # the error code when the span failed
    attributes: dict[str, Attribute] = {}


encode_batch = msgspec.msgpack.Encoder().encode
decode_batch = msgspec.msgpack.Decoder(list[SpanRecord]).decode
