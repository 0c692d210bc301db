"""Runtime events (observability, never replayed): one JSON line per event, per instance.

    <state-root>/swarms/<swarm>/instances/<instanceKey>/<agent>/runtime-events.jsonl

Types: turn.started, turn.completed, turn.failed, step.started, step.completed, step.failed,
tool.called, tool.completed, tool.failed (and tool.progress). Trace context follows
OpenTelemetry's shape: `traceId` (32 hex) is kept across agents via IPC; `spanId` (16 hex)
with `parentSpanId` forms turn -> step -> tool. `goondan logs` reads these files.
"""

from __future__ import annotations

import os
import random
import time
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


def new_id(bits: int = 64) -> str:
    """A random hex id (span and turn ids). Not a secret, so not `secrets`: that costs a
    system call per id. The module's generator is reseeded in every forked child."""
    return f"{random.getrandbits(bits):0{bits // 4}x}"


def new_span_id() -> str:
    return new_id(64)


_second: list[Any] = [-1, ""]  # the last whole second formatted, and its text


def now_iso() -> str:
    """UTC with microseconds, e.g. `2026-11-23T05:29:34.123456Z` (sortable as text)."""
    now = time.time()
    whole = int(now)
    if whole != _second[0]:  # strftime once per second, not once per event
        _second[:] = [whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))]
    return f"{_second[1]}.{int((now - whole) * 1e6):06d}Z"


_encoder = msgspec.json.Encoder()
event_decoder = msgspec.json.Decoder(RuntimeEvent)


# The events that end a turn (or start a tool, which may crash the process) are written at
# once, together with what was held back; the others wait for them: one write for a turn that
# only answers. A step that continues the turn ran tools, so `tool.called` flushed it.
_WRITE_NOW = frozenset({"tool.called", "turn.completed", "turn.failed"})


class RuntimeEventLog:
    """Appends events for one instance of one agent to its JSONL file."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / EVENTS_FILE
        self._fd: int | None = None
        self._held: list[bytes] = []

    def emit(self, event: RuntimeEvent) -> None:
        self._held.append(_encoder.encode(event) + b"\n")
        if event.type in _WRITE_NOW:
            self.flush()

    def flush(self) -> None:
        if not self._held:
            return
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        data, self._held = b"".join(self._held), []
        os.write(self._fd, data)

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
