"""Runtime events (observability, never replayed): one JSON line per event, per instance.

    <state-root>/swarms/<swarm>/instances/<instanceKey>/<agent>/runtime-events.jsonl

Types: turn.started, turn.completed, turn.failed, step.started, step.completed, step.failed,
tool.called, tool.completed, tool.failed (and tool.progress). Trace context follows
OpenTelemetry's shape: `traceId` (32 hex) is kept across agents via IPC; `spanId` (16 hex)
with `parentSpanId` forms turn -> step -> tool. `goondan logs` reads these files.
"""

from __future__ import annotations

import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

EVENTS_FILE = "runtime-events.jsonl"


class RuntimeEvent(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    type: str
    timestamp: str
    agent_name: str
    instance_key: str
    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    turn_id: str | None = None
    data: dict[str, Any] = {}


def new_span_id() -> str:
    return secrets.token_hex(8)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


_encoder = msgspec.json.Encoder()
event_decoder = msgspec.json.Decoder(RuntimeEvent)


class RuntimeEventLog:
    """Appends events for one instance of one agent; each event is one write() to the OS."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / EVENTS_FILE
        self._fd: int | None = None

    def emit(self, event: RuntimeEvent) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(self._fd, _encoder.encode(event) + b"\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
