"""The ids, timestamps and durations runtime events carry (what `goondan logs` shows and sorts),
and when the batched events reach `runtime-events.jsonl`."""

from __future__ import annotations

import asyncio
import random
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentproc import runtime_events
from agentproc.runtime_events import (
    EVENTS_FILE,
    RuntimeEvent,
    RuntimeEventLog,
    elapsed_ms,
    new_span_id,
    new_trace_id,
    new_turn_id,
    now_iso,
)
from tests import virtual_clock

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def test_timestamps_are_utc_with_microseconds_and_sort_as_text() -> None:
    stamps = [now_iso() for _ in range(2000)]
    assert all(ISO.match(s) for s in stamps), stamps[:3]
    assert stamps == sorted(stamps)
    parsed = datetime.strptime(stamps[-1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - parsed).total_seconds()) < 5


def test_timestamps_keep_leading_zeros_of_the_fraction(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fraction under 0.1 s must read .0xxxxx, not lose its zeros (text order = time order);
    # the formatted second is cached, so the next second must be formatted anew.
    clock = iter([1795412974.012345, 1795412974.999999, 1795412975.000001])
    monkeypatch.setattr(time, "time", lambda: next(clock))
    assert [now_iso() for _ in range(3)] == [
        "2026-11-23T05:49:34.012345Z",
        "2026-11-23T05:49:34.999999Z",
        "2026-11-23T05:49:35.000001Z",
    ]


def test_trace_span_and_turn_ids_are_fixed_width_hex_and_differ() -> None:
    traces = {new_trace_id() for _ in range(1000)}
    spans = {new_span_id() for _ in range(1000)}
    turns = {new_turn_id() for _ in range(1000)}
    assert len(traces) == 1000 and len(spans) == 1000 and len(turns) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t in traces)  # OpenTelemetry's trace id
    assert all(re.fullmatch(r"[0-9a-f]{16}", s) for s in spans)
    assert all(re.fullmatch(r"[0-9a-f]{12}", t) for t in turns)


def test_elapsed_ms_counts_milliseconds_to_the_microsecond() -> None:
    started = time.monotonic() - 0.25
    value = elapsed_ms(started)
    assert 250 <= value < 1250
    assert abs(value * 1000 - round(value * 1000)) < 1e-6  # whole microseconds


def _event(kind: str) -> RuntimeEvent:
    return RuntimeEvent(kind, now_iso(), "a", "k", "t" * 32, new_span_id())


def _written(directory: Path) -> list[str]:
    path = directory / EVENTS_FILE
    if not path.exists():
        return []
    decode = runtime_events.event_decoder.decode
    return [decode(line).type for line in path.read_bytes().splitlines()]


@pytest.fixture
def batch_due_after_100ms(monkeypatch: pytest.MonkeyPatch) -> None:
    # with `log`: due half of flush_after_s after the first event; the timer flush_slack_s later
    monkeypatch.setattr(random, "uniform", lambda low, high: low)


def _log_on_loop_clock(
    directory: Path, flush_after_s: float = 0.2, flush_slack_s: float = 0.2
) -> RuntimeEventLog:
    """An agent's log in `directory`, due on the running (virtual) loop's clock."""
    return RuntimeEventLog(
        directory,
        clock=asyncio.get_running_loop().time,
        flush_after_s=flush_after_s,
        flush_slack_s=flush_slack_s,
    )


@pytest.mark.usefixtures("batch_due_after_100ms")
def test_a_busy_agent_writes_its_batch_after_a_turn_once_it_is_due(tmp_path: Path) -> None:
    async def main() -> None:
        log = _log_on_loop_clock(tmp_path)
        log.emit(_event("turn.started"))
        log.emit(_event("turn.completed"))
        log.write_if_due()
        assert _written(tmp_path) == []  # held: not due yet
        await asyncio.sleep(0.15)  # due at 0.1 s; the timer would write at 0.3 s
        log.emit(_event("turn.started"))
        log.emit(_event("turn.completed"))
        assert _written(tmp_path) == []  # events alone do not write a due batch
        log.write_if_due()
        assert _written(tmp_path) == ["turn.started", "turn.completed"] * 2
        log.close()

    virtual_clock.run(main())


def test_a_quiet_agent_has_its_batch_written_by_the_timer_soon_after_it_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Due at 0.3 s, so the timer writes at 0.4 s (flush_slack_s after): while the agent is
    # idle, not a whole flush_after_s later (0.9 s), when the next burst of work may have begun.
    monkeypatch.setattr(random, "uniform", lambda low, high: low)

    async def main() -> None:
        log = _log_on_loop_clock(tmp_path, flush_after_s=0.6, flush_slack_s=0.1)
        log.emit(_event("turn.started"))
        log.emit(_event("turn.completed"))
        await asyncio.sleep(0.399)
        assert _written(tmp_path) == []
        await asyncio.sleep(0.002)
        assert _written(tmp_path) == ["turn.started", "turn.completed"]
        log.close()

    virtual_clock.run(main())


def test_a_batch_waits_past_its_slack_for_an_agent_whose_turns_come_further_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns 0.25 s apart, a slack of 0.1 s: the timer waits twice the gap between turns, so
    the next turn writes the due batch (the agent is not woken for it), and once the turns
    stop the timer still writes it, within `flush_after_s`."""
    monkeypatch.setattr(random, "uniform", lambda low, high: low)

    async def main() -> None:
        log = _log_on_loop_clock(tmp_path, flush_after_s=1.0, flush_slack_s=0.1)
        loop = asyncio.get_running_loop()

        def turn() -> None:
            log.emit(_event("turn.started"))
            log.emit(_event("turn.completed"))
            log.write_if_due()

        for _ in range(8):  # learns the gap; batches due 0.5 s after their first event
            turn()
            await asyncio.sleep(0.25)
        log.flush()
        written = len(_written(tmp_path))
        turn()  # starts a batch, due at +0.5 s; a fixed slack would fire at +0.6
        await asyncio.sleep(0.52)  # a turn missed its slot: past due, before twice the gap
        assert len(_written(tmp_path)) == written
        turn()
        assert len(_written(tmp_path)) == written + 4  # written by the turn: 2 turns' events
        turn()  # a new batch, and then no turn: its timer writes it
        started = loop.time()
        await asyncio.sleep(0.5 + 0.45)
        assert len(_written(tmp_path)) == written + 4  # twice the gap not yet past
        await asyncio.sleep(0.2)
        assert len(_written(tmp_path)) == written + 6
        assert loop.time() - started < 0.5 + 1.0  # within `flush_after_s` of its slack
        log.close()

    virtual_clock.run(main())


def test_events_without_an_event_loop_are_written_at_once(tmp_path: Path) -> None:
    log = RuntimeEventLog(tmp_path)
    log.emit(_event("turn.started"))
    assert _written(tmp_path) == ["turn.started"]
    log.close()


@pytest.mark.usefixtures("batch_due_after_100ms")
def test_a_batch_written_early_does_not_make_the_next_one_due_at_its_time(tmp_path: Path) -> None:
    async def main() -> None:
        log = _log_on_loop_clock(tmp_path)
        log.emit(_event("turn.started"))  # due at 0.1 s
        log.emit(_event("tool.called"))  # written at once, with what was held
        await asyncio.sleep(0.05)
        log.emit(_event("tool.completed"))  # a new batch: due at 0.15 s
        await asyncio.sleep(0.07)
        log.write_if_due()  # 0.12 s: the first batch's time, not the second's
        assert _written(tmp_path) == ["turn.started", "tool.called"]
        await asyncio.sleep(0.05)
        log.write_if_due()
        assert _written(tmp_path) == ["turn.started", "tool.called", "tool.completed"]
        log.close()

    virtual_clock.run(main())


def test_a_full_batch_is_written_after_the_turn_not_in_its_middle(tmp_path: Path) -> None:
    async def main() -> None:
        log = RuntimeEventLog(
            tmp_path,
            clock=asyncio.get_running_loop().time,
            flush_after_s=60.0,
            flush_slack_s=60.0,
            flush_count=4,
        )
        for kind in ("turn.started", "step.started", "step.completed", "turn.completed"):
            log.emit(_event(kind))
        log.emit(_event("turn.started"))  # a fifth, in the same turn
        assert _written(tmp_path) == []  # full, but the turn has not answered
        log.write_if_due()  # after the answer: due at once, though its time is a minute away
        assert _written(tmp_path)[:4] == ["turn.started", "step.started", "step.completed",
                                          "turn.completed"]  # fmt: skip
        for _ in range(4 * 4 - 1):  # a turn of many calls
            log.emit(_event("tool.completed"))
        assert len(_written(tmp_path)) == 5  # held while under four batches
        log.emit(_event("tool.completed"))
        assert len(_written(tmp_path)) == 5 + 4 * 4  # at four, written in the middle
        log.close()

    virtual_clock.run(main())


def test_an_event_with_data_json_cannot_hold_is_dropped_and_its_batch_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def main() -> None:
        log = _log_on_loop_clock(tmp_path)
        log.emit(_event("turn.started"))
        bad = RuntimeEvent("tool.completed", now_iso(), "a", "k", "t" * 32, new_span_id(),
                           data={"details": {"when": object()}})  # fmt: skip
        log.emit(bad)  # the turn goes on
        log.emit(_event("turn.completed"))
        log.flush()
        # Whole lines only: nothing of the dropped event's partial encoding is left between.
        assert _written(tmp_path) == ["turn.started", "turn.completed"]
        log.close()

    virtual_clock.run(main())
    assert "runtime event dropped" in capsys.readouterr().out
