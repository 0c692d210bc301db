"""What the studio reads: the agents' runtime events, tailed from their files, and the
traces, requests and delegations made of them.

The studio reads the same `runtime-events.jsonl` files as `goondan logs` (each agent writes
its own, in batches); it never touches the routing path. Files are read in a worker thread,
and only while someone is looking (a stream is open or a page asks).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import msgspec

from goondan.file_tail import FileTail

EVENTS_FILE = "runtime-events.jsonl"
# Events kept in memory for the tail, and traces for the request list and waterfalls.
MAX_EVENTS = 5000
MAX_TRACES = 300
MAX_SPANS_PER_TRACE = 2000
# Spans remembered (span id -> agent) to tell who delegated to whom.
MAX_SPAN_OWNERS = 20000
# History read at start-up: the newest bytes of each file (rotated one first).
HISTORY_BYTES = 4 * 1024 * 1024

_decoder = msgspec.json.Decoder(dict[str, Any])


class EventStore:
    """Recent runtime events of one swarm, grouped into traces."""

    def __init__(self, agents_dir: Path) -> None:
        self.agents_dir = agents_dir  # <state-root>/swarms/<swarm>/agents
        self._tails: dict[Path, FileTail] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self.traces: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._span_agent: OrderedDict[str, str] = OrderedDict()
        self.delegations: dict[tuple[str, str], int] = {}  # (caller, callee) -> turns
        # Each trace's summary, made again only once it has new events: a busy swarm's
        # viewers ask for the list at every batch of events.
        self._summaries: dict[str, dict[str, Any]] = {}
        self.seq = 0  # events taken in so far: a stream sends those past its own count

    def read(self) -> list[dict[str, Any]]:
        """`collect` then `take`: what the files have gained, oldest first."""
        new = self.collect()
        self.take(new)
        return new

    def collect(self) -> list[dict[str, Any]]:
        """The events the files have gained, oldest first (blocking: the studio calls it in a
        thread, one call at a time). Changes nothing the readers see: `take` does that, on
        the event loop, so no reader meets a collection changing under it."""
        for path in sorted(self.agents_dir.glob(f"*/{EVENTS_FILE}")):
            if path not in self._tails:
                self._tails[path] = FileTail(path, HISTORY_BYTES)
        new: list[dict[str, Any]] = []
        for tail in self._tails.values():
            for line in tail.read_new():
                try:
                    event = _decoder.decode(line)
                except msgspec.DecodeError:
                    continue
                if isinstance(event.get("traceId"), str) and isinstance(event.get("type"), str):
                    new.append(event)
        new.sort(key=lambda e: str(e.get("timestamp", "")))
        return new

    def take(self, new: list[dict[str, Any]]) -> None:
        for event in new:
            self._take(event)

    def _take(self, event: dict[str, Any]) -> None:
        self.seq += 1
        event["seq"] = self.seq
        self.events.append(event)
        trace_id = event["traceId"]
        spans = self.traces.get(trace_id)
        if spans is None:
            spans = self.traces[trace_id] = []
            while len(self.traces) > MAX_TRACES:
                self._summaries.pop(self.traces.popitem(last=False)[0], None)
        self._summaries.pop(trace_id, None)
        if len(spans) < MAX_SPANS_PER_TRACE:
            spans.append(event)
        agent = str(event.get("agentName", ""))
        span_id = event.get("spanId")
        if event["type"] == "tool.called" and isinstance(span_id, str):
            self._span_agent[span_id] = agent
            while len(self._span_agent) > MAX_SPAN_OWNERS:
                self._span_agent.popitem(last=False)
        if event["type"] == "turn.started":
            caller = self._span_agent.get(str(event.get("parentSpanId")))
            if caller is not None and caller != agent:
                key = (caller, agent)
                self.delegations[key] = self.delegations.get(key, 0) + 1

    def tail(
        self,
        *,
        agent: str | None = None,
        type_prefix: str | None = None,
        trace: str | None = None,
        limit: int = 200,
    ) -> list[dict[str, Any]]:
        out = [e for e in self.events if matches(e, agent, type_prefix, trace)]
        return out[-limit:]

    def requests(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest traces first, each summed up by its root turn."""
        rows = []
        for trace_id, events in self.traces.items():
            row = self._summaries.get(trace_id)
            if row is None:
                row = self._summaries[trace_id] = summarize(trace_id, events)
            rows.append(row)
        rows.sort(key=lambda r: r["startedAt"], reverse=True)
        return rows[:limit]

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The spans of a trace; `trace_id` may be a unique prefix (6 characters or more)."""
        events = self.traces.get(trace_id)
        if events is None and len(trace_id) >= 6:
            found = [t for t in self.traces if t.startswith(trace_id)]
            if len(found) == 1:
                trace_id = found[0]
                events = self.traces[trace_id]
        if events is None:
            return None
        return {"traceId": trace_id, **summarize(trace_id, events), "spans": build_spans(events)}


def matches(
    event: dict[str, Any], agent: str | None, type_prefix: str | None, trace: str | None
) -> bool:
    return (
        (not agent or event.get("agentName") == agent)
        and (not type_prefix or str(event.get("type", "")).startswith(type_prefix))
        and (not trace or str(event.get("traceId", "")).startswith(trace))
    )


_KIND = {"turn": "turn", "step": "step", "tool": "tool"}
_ENDS = {"completed": "ok", "failed": "error"}


def build_spans(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn, step and tool spans from their start and end events, in start order."""
    spans: dict[str, dict[str, Any]] = {}
    for event in events:
        kind, _, phase = str(event["type"]).partition(".")
        if kind not in _KIND:
            continue
        span_id = str(event.get("spanId", ""))
        data = event.get("data") or {}
        if phase in ("started", "called"):
            span = spans.setdefault(span_id, _new_span(event, kind))
            span["start"] = event.get("timestamp")
            if kind == "tool":
                span["name"] = data.get("toolName", "tool")
                span["arguments"] = data.get("arguments")
            elif kind == "step":
                span["name"] = f"step {data.get('stepIndex', '')}".strip()
            else:
                span["name"] = f"turn {event.get('agentName', '')}"
                span["input"] = data.get("input")
                span["source"] = data.get("source")
        elif phase in _ENDS:
            span = spans.setdefault(span_id, _new_span(event, kind))
            span["end"] = event.get("timestamp")
            span["status"] = data.get("status") or _ENDS[phase]
            if phase == "failed" or data.get("status") == "error":
                span["status"] = "error"
                span["error"] = data.get("errorMessage") or data.get("errorCode") or "failed"
                if data.get("errorCode"):
                    span["errorCode"] = data["errorCode"]
            if "duration" in data:
                span["durationMs"] = data["duration"]
            usage = data.get("tokenUsage")
            if isinstance(usage, dict):
                span["inputTokens"] = usage.get("inputTokens", 0)
                span["outputTokens"] = usage.get("outputTokens", 0)
            if data.get("finishReason"):
                span["finishReason"] = data["finishReason"]
    return sorted(spans.values(), key=lambda s: str(s.get("start") or s.get("end") or ""))


def _new_span(event: dict[str, Any], kind: str) -> dict[str, Any]:
    return {
        "spanId": event.get("spanId"),
        "parentSpanId": event.get("parentSpanId"),
        "kind": kind,
        "name": kind,
        "agent": event.get("agentName"),
        "instanceKey": event.get("instanceKey"),
        "start": None,
        "end": None,
        "status": "running",
    }


def summarize(trace_id: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """A trace in one row: who was asked what, by whom, how it went and how long it took."""
    span_ids = {e.get("spanId") for e in events}
    root = next(
        (
            e
            for e in events
            if e["type"] == "turn.started" and e.get("parentSpanId") not in span_ids
        ),
        events[0],
    )
    root_span = root.get("spanId")
    end = next(
        (
            e
            for e in events
            if e.get("spanId") == root_span and e["type"] in ("turn.completed", "turn.failed")
        ),
        None,
    )
    agents = list(dict.fromkeys(str(e.get("agentName", "")) for e in events))
    errors = sum(1 for e in events if str(e["type"]).endswith(".failed"))
    tokens = sum(
        int((e.get("data") or {}).get("tokenUsage", {}).get("totalTokens", 0) or 0)
        for e in events
        if e["type"] == "turn.completed"
    )
    if end is None:
        status = "running"
    elif end["type"] == "turn.failed" or errors:
        status = "error"
    else:
        status = "ok"
    data = root.get("data") or {}
    return {
        "traceId": trace_id,
        "agent": root.get("agentName"),
        "instanceKey": root.get("instanceKey"),
        "source": data.get("source"),
        "input": _cut(data.get("input")),
        "startedAt": root.get("timestamp") or "",
        "durationMs": (end.get("data") or {}).get("duration") if end else None,
        "status": status,
        "agents": agents,
        "errors": errors,
        "tokens": tokens,
        "events": len(events),
    }


def _cut(text: Any, limit: int = 160) -> str | None:
    if not isinstance(text, str):
        return None
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
