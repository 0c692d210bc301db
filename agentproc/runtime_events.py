"""Runtime events (observability, never replayed): one JSON line per event, one file per agent
(every instance's events, each carrying its `instanceKey`):

    <state-root>/swarms/<swarm>/agents/<agent>/runtime-events.jsonl

One file per agent, not per instance: a new conversation then costs its directory and its
`events.jsonl`, not a third inode (on ext4 without a journal, right after a mass deletion, a
new inode is slow: docs/performance.md, figure 7), an agent holds one file open, not one per
loaded instance, and `goondan logs -f` follows as many files as there are agents.

Types: turn.started, turn.completed, turn.failed, step.started, step.completed, step.failed,
tool.called, tool.completed, tool.failed (and tool.progress). Trace context follows
OpenTelemetry's shape: `traceId` (32 hex) is kept across agents via IPC; `spanId` (16 hex)
with `parentSpanId` forms turn -> step -> tool. `goondan logs` reads these files. A file past
`rotate_bytes` becomes `runtime-events.jsonl.1` (replacing the one before): an agent running for
months keeps at most two files of events. Deleting an instance leaves its events in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from goondan.files import open_append
from goondan.settings import DEFAULTS

EVENTS_FILE = "runtime-events.jsonl"
ROTATED_FILE = EVENTS_FILE + ".1"  # the previous `rotate_bytes` of events
DROP_WARN_S = 60.0  # at most one warning this often about events a full disk dropped


# Not tracked by the cyclic garbage collector: there is nothing to find (an event's data is
# built for it, JSON-like, and never refers back to it).
class RuntimeEvent(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel", gc=False):
    type: str
    timestamp: str
    agent_name: str
    instance_key: str
    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    turn_id: str | None = None
    data: dict[str, Any] = {}


# Ids, timestamps and durations are made several times a turn, mostly with cold caches: they
# avoid format specs (`:016x`, `:06d`) and `round(x, 3)`, whose C paths cost a cold turn
# several microseconds each, for plain int -> bytes/str conversions.


def new_span_id() -> str:
    """16 hex digits. Not a secret, so not `secrets` (a system call per id); `random`'s
    generator is reseeded in every forked child, so agents do not repeat each other."""
    return random.getrandbits(64).to_bytes(8, "big").hex()


def new_trace_id() -> str:
    """32 hex digits, for a request that came without a trace (as `new_span_id`)."""
    return random.getrandbits(128).to_bytes(16, "big").hex()


def new_turn_id() -> str:
    return random.getrandbits(48).to_bytes(6, "big").hex()


_second: list[tuple[int, str]] = [(-1, "")]  # the last whole second, and its text


def now_iso() -> str:
    """UTC with microseconds, e.g. `2026-11-23T05:29:34.123456Z` (sortable as text)."""
    micros = int(time.time() * 1_000_000)
    whole = micros // 1_000_000
    second, text = _second[0]
    if whole != second:  # strftime once per second, not once per event
        text = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(whole))
        _second[0] = (whole, text)
    return text + str(1_000_000 + micros - whole * 1_000_000)[1:] + "Z"


def elapsed_ms(started: float) -> float:
    """Milliseconds since `started` (`time.monotonic()`), to the microsecond."""
    return int((time.monotonic() - started) * 1_000_000) / 1000


_encoder = msgspec.json.Encoder()
event_decoder = msgspec.json.Decoder(RuntimeEvent)


# Runtime events are written in batches, as OpenTelemetry's batch span processor exports
# spans: a write per turn would cost as much as a short turn. A batch is due `flush_after_s`
# after its first event (a random half to whole of it, so that agents busy with the same wave
# of work do not all write in the same moment). Once a turn has answered, a due batch is
# written in the wake-up the turn has anyway (`write_if_due`): at 200 busy agents on 2 cores a
# wake-up of its own would cost more than the write. The timer, `flush_slack_s` after the batch
# is due (or twice the time between the agent's recent turns, if longer: `_slack`), is for a
# process with no turn by then: it writes while the agent is idle, rather than in the first
# turn of the next burst, all at once with its peers (docs/performance.md, "Measurements behind
# the code"). A batch that holds `flush_count` events is due at once, so
# it too waits for the answer: written in the middle of a turn, its write would be that
# request's latency, one turn in every `flush_count / 4` (a turn has four events). One that
# grows to `_HARD_LIMIT` times that (a turn of many tool calls) goes out in the middle. A batch
# also goes out at once before a tool runs (which may take the process down: the evidence is
# on disk first), on a failure, and at close. Each event is encoded as it is emitted, onto the
# batch's bytes: its data is still in the caches then, and its objects are freed at once.
# Encoded all at once when written, a batch of 256 cost ~210 µs on cold caches (objects made
# up to a second before), on the loop right after a turn's answer, where the next request
# could wait for it (docs/performance.md, "Runtime events encoded as they come").
_WRITE_NOW = frozenset({"tool.called", "tool.approval", "step.failed", "turn.failed"})
_HARD_LIMIT = 4


class RuntimeEventLog:
    """Appends an agent's events to its JSONL file (in `directory`), in batches."""

    def __init__(
        self,
        directory: Path,
        *,
        rotate_bytes: int = DEFAULTS.storage.runtime_events_rotate_bytes,
        flush_after_s: float = DEFAULTS.storage.runtime_events_flush_after_s,
        flush_slack_s: float = DEFAULTS.storage.runtime_events_flush_slack_s,
        flush_count: int = DEFAULTS.storage.runtime_events_flush_count,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`flush_after_s`, `flush_slack_s`, `flush_count`: when a batch is written (above);
        past `rotate_bytes` the file is rotated. `clock`: what `due` is measured on."""
        self.path = directory / EVENTS_FILE
        self._clock = clock  # when batches are due; tests give the event loop's virtual clock
        self._rotate_bytes = rotate_bytes
        self._flush_after_s = flush_after_s
        self._flush_slack_s = flush_slack_s
        self._answered_at: float | None = None  # on `clock`, the last `write_if_due`
        self._turn_gap = 0.0  # the recent time between answers (a moving average)
        self._flush_count = flush_count
        self._size = 0  # of the file behind _fd
        self._fd: int | None = None
        self._held = bytearray()  # the batch, encoded: a JSON line per event
        self._held_count = 0
        self._timer: asyncio.TimerHandle | None = None
        self.due: float | None = None  # when the held batch is due (on `clock`)
        self._warned_at = -DROP_WARN_S  # when a dropped batch was last logged
        self._dropped_bytes = 0  # dropped since then

    def emit(self, event: RuntimeEvent) -> None:
        held = self._held
        size = len(held)
        try:
            _encoder.encode_into(event, held, -1)
        except (TypeError, msgspec.EncodeError) as exc:  # a value JSON has no form for
            del held[size:]  # what the encoder left of it
            self._unencodable(event, exc)
            return
        held.append(0x0A)  # "\n"
        self._held_count = count = self._held_count + 1
        if event.type in _WRITE_NOW or count >= self._flush_count * _HARD_LIMIT:
            self.flush()
        elif count >= self._flush_count and self._timer is not None:
            self.due = self._clock()  # written after the turn has answered (`write_if_due`)
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop to come back later: write now
                self.flush()
                return
            delay = self._flush_after_s * random.uniform(0.5, 1.0)
            self.due = self._clock() + delay
            self._timer = loop.call_later(delay + self._slack(), self.flush)

    def _slack(self) -> float:
        """How long after a batch is due its timer waits for a turn to write it: longer than
        a busy agent waits for its next turn (twice the recent gap, at least `flush_slack_s`,
        at most `flush_after_s`), so a busy agent is not woken for it; at 1,000 agents a turn
        comes every ~200 ms, and with a fixed 0.1 s half the batches woke their agent."""
        return min(max(self._flush_slack_s, 2 * self._turn_gap), self._flush_after_s)

    def write_if_due(self) -> None:
        """Write the held batch if it is due (called after a turn has answered)."""
        now = self._clock()
        if self._answered_at is not None:  # a gap past `flush_after_s` counts as that
            gap = min(now - self._answered_at, self._flush_after_s)
            self._turn_gap += (gap - self._turn_gap) / 4
        self._answered_at = now
        if self.due is not None and self.due <= now:
            self.flush()

    def flush(self) -> None:
        """Write what is held now (readers in this process call it before reading)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self.due = None
        if not self._held_count:
            return
        data = self._held
        self._held = bytearray()
        self._held_count = 0
        try:
            if self._fd is None:
                self._fd = open_append(self.path)
                self._size = os.fstat(self._fd).st_size
            written = os.write(self._fd, data)
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            # Observability only: a full disk drops the batch, it never stops the agent.
            self._dropped(len(data), exc)
            return
        self._size += len(data)
        if self._size > self._rotate_bytes:
            os.close(self._fd)
            self._fd = None
            os.replace(self.path, self.path.with_name(ROTATED_FILE))

    def _unencodable(self, event: RuntimeEvent, exc: Exception) -> None:
        """Drop an event whose data has no JSON form, not the turn that emitted it (what the
        loop puts in an event is JSON-like already, a tool's details made so where they are
        built: this is the last guard of the log's lines)."""
        structlog.get_logger().warning(
            "runtime event dropped: its data cannot be written as JSON",
            eventType=event.type,
            instanceKey=event.instance_key,
            error=str(exc),
        )

    def _dropped(self, size: int, exc: OSError) -> None:
        """Cut a partly written batch off again and warn, at most once per DROP_WARN_S."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
        now = time.monotonic()
        self._dropped_bytes += size
        if now - self._warned_at >= DROP_WARN_S:
            self._warned_at = now
            structlog.get_logger().warning(
                "runtime events dropped: could not write",
                path=str(self.path),
                error=exc.strerror or str(exc),
                droppedBytes=self._dropped_bytes,
            )
            self._dropped_bytes = 0

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
