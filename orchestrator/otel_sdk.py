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
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from ipc.endpoints import SPAN_SOCKET_ENV
from ipc.spans import SpanRecord, decode_batch

READ_EVERY_S = 0.2  # how often the agents' connections are read
LISTEN_BACKLOG = 4096  # agents connect as they start, before they are accepted
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


def _env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


class SpanExport:
    """The swarm's span export: agents' connections and `TracedRouter` feed it, one thread of
    its own reads, converts and exports.

    Nothing waits on the span socket. The thread wakes every `READ_EVERY_S`, takes what the
    agents' connections hold (and new connections) without blocking, and sleeps again: an
    agent's send wakes no one, so it costs the agent a few microseconds and the event loop
    nothing. A wake-up per span would cost a context switch each, on the agent's and the
    orchestrator's turn. For the same reason this is not the SDK's `BatchSpanProcessor`, which
    wants an SDK span made as each span ends: here the SDK spans of a batch are made when it is
    sent. Batching follows the SDK's `OTEL_BSP_*` variables (delay, batch and queue sizes),
    with the SDK's defaults."""

    def __init__(self, exporter: SpanExporter, service: str, path: Path) -> None:
        # The SDK logs each failed batch (and each retry); `_Warned` says it once a minute.
        logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
        self._exporter = _Warned(exporter)
        self._resource = Resource.create({"service.name": service})
        self._scope = InstrumentationScope("goondan")
        self._delay_s = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._batch = _env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
        self._queue = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self._lock = threading.Lock()
        self._records: list[SpanRecord] = []  # the router's, and the agents' once read
        self._dropped = 0  # over the queue size since the last export
        self._wake = threading.Event()
        self.path = path
        path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(LISTEN_BACKLOG)
        self._listener.setblocking(False)
        self._agents: dict[socket.socket, bytearray] = {}  # connection -> bytes not yet framed
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="goondan-otlp", daemon=True)
        self._thread.start()

    def export(self, record: SpanRecord) -> None:
        """Queue one finished span for the next batch (any thread; no SDK work here)."""
        with self._lock:
            if len(self._records) >= self._queue:
                self._dropped += 1
                return
            self._records.append(record)

    def _run(self) -> None:
        due = time.monotonic() + self._delay_s
        while not self._closing:
            self._wake.wait(min(READ_EVERY_S, self._delay_s))
            self._read()
            with self._lock:
                queued = len(self._records)
            if queued >= self._batch or (queued and time.monotonic() >= due):
                self._export_queued()
            if time.monotonic() >= due:
                due = time.monotonic() + self._delay_s
        self._read()  # what came before `close`
        self._export_queued()

    def _read(self) -> None:
        """Take new connections and what every connection holds, without waiting."""
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            conn.setblocking(False)
            self._agents[conn] = bytearray()
        records: list[SpanRecord] = []
        for conn, buffer in list(self._agents.items()):
            ended = False
            while True:
                try:
                    data = conn.recv(1 << 18)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:  # the agent is gone (what it sent before is read already)
                    ended = True
                    break
                buffer += data
            records.extend(_frames(buffer))
            if ended:
                del self._agents[conn]
                conn.close()
        if records:
            with self._lock:
                room = self._queue - len(self._records)
                if len(records) > room:
                    self._dropped += len(records) - max(room, 0)
                    records = records[: max(room, 0)]
                self._records.extend(records)

    def _export_queued(self) -> None:
        with self._lock:
            records, self._records = self._records, []
            dropped, self._dropped = self._dropped, 0
        if dropped:
            _log.warning("spans dropped: more came than the queue holds", spans=dropped)
        spans = [span for span in map(self._span, records) if span is not None]
        for start in range(0, len(spans), self._batch):
            self._exporter.export(spans[start : start + self._batch])

    def _span(self, record: SpanRecord) -> ReadableSpan | None:
        try:
            trace_id = int(record.trace_id, 16)
            context = SpanContext(trace_id, int(record.span_id, 16), False, _SAMPLED)
            parent = (
                SpanContext(trace_id, int(record.parent_span_id, 16), False, _SAMPLED)
                if record.parent_span_id
                else None
            )
            kind = SpanKind(record.kind)
        except ValueError:  # not from us
            return None
        status = (
            Status(StatusCode.ERROR, record.error) if record.error else Status(StatusCode.UNSET)
        )
        return ReadableSpan(
            record.name,
            context,
            parent,
            self._resource,
            record.attributes,
            kind=kind,
            status=status,
            start_time=record.start_ns,
            end_time=record.end_ns,
            instrumentation_scope=self._scope,
        )

    def close(self) -> None:
        """Read and send what is left, waiting at most CLOSE_WAIT_S (a dead collector is
        retried for the exporter's whole timeout: not while the daemon exits)."""
        self._closing = True
        self._wake.set()
        self._thread.join(CLOSE_WAIT_S)
        if self._thread.is_alive():
            _log.warning("the last spans were not exported: the collector did not answer")
        self._listener.close()
        for conn in list(self._agents):
            conn.close()
        self.path.unlink(missing_ok=True)
        os.environ.pop(SPAN_SOCKET_ENV, None)
        with contextlib.suppress(Exception):
            self._exporter.shutdown()


def _frames(buffer: bytearray) -> list[SpanRecord]:
    """The whole length-prefixed batches at the start of `buffer`, taken out of it."""
    records: list[SpanRecord] = []
    offset = 0
    while len(buffer) - offset >= 4:
        size = int.from_bytes(buffer[offset : offset + 4], "big")
        if len(buffer) - offset - 4 < size:
            break
        try:
            records.extend(decode_batch(bytes(buffer[offset + 4 : offset + 4 + size])))
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass  # not from an agent of ours
        offset += 4 + size
    del buffer[:offset]
    return records


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
