"""The studio's reading of runtime-event files: tailing across rotations, traces, spans,
delegations, and the address check."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.studio import events as studio_events
from orchestrator.studio.events import EventStore, build_spans
from orchestrator.studio.server import StudioAddressError, parse_address


def _event(
    type: str,
    agent: str,
    span: str,
    parent: str | None = None,
    trace: str = "t" * 32,
    second: int = 0,
    **data: Any,
) -> dict[str, Any]:
    return {
        "type": type,
        "timestamp": f"2026-11-27T02:00:{second:02d}.000000Z",
        "agentName": agent,
        "instanceKey": "cli",
        "traceId": trace,
        "spanId": span,
        "parentSpanId": parent,
        "data": data,
    }


def _write(path: Path, *events: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for event in events:
            f.write(json.dumps(event) + "\n")


def test_reads_new_lines_and_follows_a_rotation(tmp_path):
    log = tmp_path / "agents" / "a" / "runtime-events.jsonl"
    _write(log, _event("turn.started", "a", "s1", second=1))
    store = EventStore(tmp_path / "agents")
    assert [e["spanId"] for e in store.read()] == ["s1"]
    assert store.read() == []
    # Half a line: it waits for its end.
    with open(log, "a") as f:
        f.write(json.dumps(_event("step.started", "a", "s2", "s1", second=2))[:20])
    assert store.read() == []
    with open(log, "a") as f:
        f.write(json.dumps(_event("step.started", "a", "s2", "s1", second=2))[20:] + "\n")
    _write(log, _event("step.completed", "a", "s2", "s1", second=3))
    # The agent rotates the file after those lines: the rest of the old one is read first.
    os.replace(log, log.with_name("runtime-events.jsonl.1"))
    _write(log, _event("turn.completed", "a", "s1", second=4))
    assert [e["type"] for e in store.read()] == ["step.started", "step.completed", "turn.completed"]
    assert [e["seq"] for e in store.events] == [1, 2, 3, 4]


def test_history_at_start_takes_the_rotated_file_first(tmp_path, monkeypatch):
    log = tmp_path / "agents" / "a" / "runtime-events.jsonl"
    _write(log.with_name("runtime-events.jsonl.1"), _event("turn.started", "a", "old", second=1))
    _write(log, _event("turn.started", "a", "new", second=2))
    assert [e["spanId"] for e in EventStore(tmp_path / "agents").read()] == ["old", "new"]
    # A file larger than the history read: its cut first line is not taken.
    monkeypatch.setattr(studio_events, "HISTORY_BYTES", 300)
    for n in range(10):
        _write(log, _event("turn.started", "a", f"n{n}", second=3 + n))
    spans = [e["spanId"] for e in EventStore(tmp_path / "agents").read()]
    assert spans and spans == [f"n{n}" for n in range(10 - len(spans), 10)]


def test_spans_delegations_and_summary(tmp_path):
    agents = tmp_path / "agents"
    _write(
        agents / "boss" / "runtime-events.jsonl",
        _event("turn.started", "boss", "T1", second=1, input="do it", source="cli:send"),
        _event("step.started", "boss", "S1", "T1", second=1, stepIndex=0),
        _event("tool.called", "boss", "K1", "S1", second=1, toolName="agents__request"),
        _event("tool.completed", "boss", "K1", "S1", second=3, status="ok", duration=2000.0),
        _event(
            "step.completed",
            "boss",
            "S1",
            "T1",
            second=3,
            duration=2000.0,
            tokenUsage={"inputTokens": 10, "outputTokens": 4, "totalTokens": 14},
        ),
        _event(
            "turn.completed",
            "boss",
            "T1",
            second=3,
            duration=2000.0,
            tokenUsage={"inputTokens": 10, "outputTokens": 4, "totalTokens": 14},
        ),
    )
    _write(
        agents / "helper" / "runtime-events.jsonl",
        _event("turn.started", "helper", "T2", "K1", second=2),
        _event("tool.called", "helper", "K2", "T2", second=2, toolName="x__y"),
        _event(
            "tool.failed",
            "helper",
            "K2",
            "T2",
            second=2,
            status="error",
            errorCode="E_TOOL",
            errorMessage="boom",
        ),
        _event("turn.failed", "helper", "T2", "K1", second=2, errorMessage="gave up"),
    )
    store = EventStore(agents)
    store.read()
    assert store.delegations == {("boss", "helper"): 1}
    [row] = store.requests()
    assert row["agent"] == "boss" and row["input"] == "do it" and row["source"] == "cli:send"
    assert row["status"] == "error" and row["errors"] == 2 and row["tokens"] == 14
    assert row["agents"] == ["boss", "helper"] and row["durationMs"] == 2000.0
    trace = store.trace("tttttt")
    assert trace is not None
    spans = {s["spanId"]: s for s in trace["spans"]}
    assert spans["T2"]["parentSpanId"] == "K1" and spans["T2"]["status"] == "error"
    assert spans["K2"]["error"] == "boom" and spans["K2"]["errorCode"] == "E_TOOL"
    assert spans["S1"]["inputTokens"] == 10 and spans["S1"]["outputTokens"] == 4
    assert spans["K1"]["name"] == "agents__request" and spans["K1"]["durationMs"] == 2000.0
    assert store.trace("ttttt") is None  # a prefix needs 6 characters
    assert [e["type"] for e in store.tail(agent="helper", type_prefix="tool.")] == [
        "tool.called",
        "tool.failed",
    ]


def test_a_span_still_running_has_no_end():
    [span] = build_spans([_event("turn.started", "a", "T", second=1)])
    assert span["status"] == "running" and span["end"] is None


def test_trace_and_event_memory_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(studio_events, "MAX_TRACES", 3)
    log = tmp_path / "agents" / "a" / "runtime-events.jsonl"
    for n in range(5):
        _write(log, _event("turn.started", "a", f"s{n}", trace=f"{n:032x}", second=n))
    store = EventStore(tmp_path / "agents")
    store.read()
    assert list(store.traces) == [f"{n:032x}" for n in (2, 3, 4)]


@pytest.mark.parametrize("text", ["127.0.0.1:8765", "localhost:0", "[::1]:9000", "127.0.0.2:1"])
def test_loopback_addresses_are_taken(text):
    host, port = parse_address(text)
    assert port in (8765, 0, 9000, 1) and host


@pytest.mark.parametrize("text", ["0.0.0.0:8765", "192.168.1.4:80", "example.com:80"])
def test_other_hosts_need_the_flag(text):
    with pytest.raises(StudioAddressError, match="--studio-allow-remote"):
        parse_address(text)
    assert parse_address(text, allow_remote=True)[1] == int(text.rsplit(":", 1)[1])


@pytest.mark.parametrize("text", ["8765", ":8765", "127.0.0.1:", "127.0.0.1:x", "h:70000"])
def test_malformed_addresses_are_refused(text):
    with pytest.raises(StudioAddressError, match="HOST:PORT"):
        parse_address(text)


def test_a_request_summary_follows_its_trace(tmp_path):
    log = tmp_path / "agents" / "a" / "runtime-events.jsonl"
    _write(log, _event("turn.started", "a", "T", second=1, input="hi"))
    store = EventStore(tmp_path / "agents")
    store.read()
    assert store.requests()[0]["status"] == "running"
    assert store.requests()[0] is store.requests()[0]  # made once while nothing changes
    _write(log, _event("turn.completed", "a", "T", second=2, duration=5.0))
    store.read()
    [row] = store.requests()
    assert row["status"] == "ok" and row["durationMs"] == 5.0 and row["events"] == 2
