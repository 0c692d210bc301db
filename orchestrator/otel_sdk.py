"""The OpenTelemetry SDK side of trace export (orchestrator/otel_export.py says how it fits):
imported only when traces are exported."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import structlog
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from ipc.spans import SPAN_SOCKET_ENV, SpanRecord, decode_batch

RECEIVE_BYTES = 4 * 1024 * 1024  # the receive buffer asked for (the kernel may give less)
WARN_EVERY_S = 60.0  # at most one warning this often about batches the collector refused
CLOSE_WAIT_S = 3.0  # at stop: how long the last spans may take to leave
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

_log = structlog.get_logger().bind(component="otel")


def make_exporter(protocol: str) -> SpanExporter:
    """The OTLP span exporter for `protocol`. Raises ImportError saying what is missing."""
    if protocol == "grpc":
        try:  # an optional package of its own (grpcio is large): by name, if installed
            grpc = importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
        except ImportError:
            raise ImportError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the opentelemetry-exporter-otlp-proto-grpc "
                "package, which is not installed; use http/protobuf (the collector's port 4318)"
            ) from None
        exporter: SpanExporter = grpc.OTLPSpanExporter()
        return exporter
    if protocol != "http/protobuf":
        raise ImportError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported; use http/protobuf "
            "(or grpc with opentelemetry-exporter-otlp-proto-grpc installed)"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ImportError(
            "OTEL_TRACES_EXPORTER=otlp needs the OpenTelemetry SDK: pip install 'goondan[otel]'"
        ) from None
    return OTLPSpanExporter()


class SpanExport:
    """One SDK span processor for the whole swarm, fed by the span socket and `TracedRouter`."""

    def __init__(self, exporter: SpanExporter, service: str, path: Path) -> None:
        # The SDK logs each failed batch (and each retry); `_Warned` says it once a minute.
        logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
        # No exit hook: a dead collector must not hold up the daemon's exit (`close` bounds it).
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": service}), shutdown_on_exit=False
        )
        self._processor = BatchSpanProcessor(_Warned(exporter))
        self._provider.add_span_processor(self._processor)
        self._resource = self._provider.resource
        self._scope = InstrumentationScope("goondan")
        self.path = path
        path.unlink(missing_ok=True)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with contextlib.suppress(OSError):
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BYTES)
        self._sock.bind(str(path))
        self._closing = False
        self._thread = threading.Thread(target=self._receive, name="goondan-spans", daemon=True)
        self._thread.start()

    def export(self, record: SpanRecord) -> None:
        """Hand one finished span to the batch processor (any thread)."""
        try:
            trace_id = int(record.trace_id, 16)
            context = SpanContext(trace_id, int(record.span_id, 16), False, _SAMPLED)
            parent = (
                SpanContext(trace_id, int(record.parent_span_id, 16), False, _SAMPLED)
                if record.parent_span_id
                else None
            )
        except ValueError:  # not hex: not from us
            return
        status = (
            Status(StatusCode.ERROR, record.error) if record.error else Status(StatusCode.UNSET)
        )
        span = ReadableSpan(
            record.name,
            context,
            parent,
            self._resource,
            record.attributes,
            kind=SpanKind(record.kind),
            status=status,
            start_time=record.start_ns,
            end_time=record.end_ns,
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)

    def _receive(self) -> None:
        while True:
            try:
                data = self._sock.recv(1 << 20)
            except OSError:
                return
            if self._closing:
                return
            try:
                batch = decode_batch(data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            for record in batch:
                try:
                    self.export(record)
                except Exception:  # a bad record must not end the receiver
                    _log.exception("a span could not be exported", span=record.name)

    def close(self) -> None:
        """Stop receiving and let the last spans leave, waiting at most CLOSE_WAIT_S."""
        self._closing = True
        with contextlib.suppress(OSError):  # wakes the receiver
            wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            wake.sendto(b"", str(self.path))
            wake.close()
        self._thread.join(1.0)
        self._sock.close()
        self.path.unlink(missing_ok=True)
        os.environ.pop(SPAN_SOCKET_ENV, None)
        # The exporter retries a dead collector for its whole timeout: not while we exit.
        stopper = threading.Thread(target=self._provider.shutdown, name="otel-stop", daemon=True)
        stopper.start()
        stopper.join(CLOSE_WAIT_S)
        if stopper.is_alive():
            _log.warning("the last spans were not exported: the collector did not answer")


class _Warned(SpanExporter):
    """The real exporter, saying at most once a minute that the collector refused spans."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._lost = 0
        self._warned_at = -WARN_EVERY_S

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._lost += len(spans)
            now = time.monotonic()
            if now - self._warned_at >= WARN_EVERY_S:
                self._warned_at = now
                _log.warning(
                    "spans not exported: the collector did not take them", spans=self._lost
                )
                self._lost = 0
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)
