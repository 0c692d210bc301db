"""`goondan logs`: the runtime events (turns, steps, tool calls) of stored instances."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec

from agentproc.runtime_events import EVENTS_FILE, ROTATED_FILE, RuntimeEvent, event_decoder
from goondan.file_tail import FileTail
from goondan.paths import StatePaths

FOLLOW_INTERVAL_S = 0.3
AGENT_FILES = "swarms/*/agents/*/"  # each agent's events, every instance's in one file
INSTANCE_FILES = "swarms/*/instances/*/*/"  # where earlier builds kept each instance's


def _decoded(lines: list[bytes]) -> Iterator[RuntimeEvent]:
    for line in lines:
        try:
            yield event_decoder.decode(line)
        except msgspec.DecodeError:
            continue  # a line from a crashed writer, or not an event


FLUSH_WAIT_MS = 2_000  # for each running agent to write the events it holds
MIN_TRACE_PREFIX = 6  # hex digits of a trace id `--trace` needs to tell traces apart
ARGS_WIDTH = 80  # characters of a tool call's arguments a readable line shows


def run_logs(args: argparse.Namespace) -> int:
    paths = StatePaths.at(args.state_root)
    if getattr(args, "daemon", False):
        return _daemon_log(paths, args)
    if args.trace is not None:
        args.trace = args.trace.strip().lower()
        if len(args.trace) < MIN_TRACE_PREFIX:
            print(
                f"goondan: --trace needs at least {MIN_TRACE_PREFIX} characters of the trace "
                f"id, got {args.trace!r}",
                file=sys.stderr,
            )
            return 2
    _flush_running_agents(paths, args.agent)
    sources: dict[Path, FileTail] = {}
    json_out = args.json or not sys.stdout.isatty()

    def scan() -> list[RuntimeEvent]:
        for path in sorted(paths.root.glob(AGENT_FILES + EVENTS_FILE)):
            sources.setdefault(path, FileTail(path))
        events = [e for s in sources.values() for e in _decoded(s.read_new()) if _wanted(e, args)]
        events.sort(key=lambda e: e.timestamp)
        return events

    # History, read once before the live files are followed: the rotated files, and the
    # instances' files earlier builds wrote (nothing appends to them now; following them would
    # walk every conversation's directory at every poll).
    once = [AGENT_FILES + ROTATED_FILE, INSTANCE_FILES + EVENTS_FILE, INSTANCE_FILES + ROTATED_FILE]
    history = [
        e
        for pattern in once
        for p in sorted(paths.root.glob(pattern))
        for e in _decoded(FileTail(p).read_new())
        if _wanted(e, args)
    ]
    events = sorted(history + scan(), key=lambda e: e.timestamp)
    if args.trace is not None:
        traces = sorted({e.trace_id for e in events})
        if len(traces) > 1:
            print(
                f"goondan: --trace {args.trace} matches {len(traces)} traces; give more of it:",
                *(f"  {t}" for t in traces[:20]),
                sep="\n",
                file=sys.stderr,
            )
            return 2
        if traces:
            args.trace = traces[0]  # followed on: the one trace, not every one with the prefix
        elif not args.follow:
            print(f"goondan: no runtime events of trace {args.trace}", file=sys.stderr)
            return 1
    if not sources and not history and not args.follow:
        print(
            f"goondan: no runtime events under {paths.root} "
            f"(the daemon's own log is {paths.daemon_log})",
            file=sys.stderr,
        )
        return 1
    for event in events[-args.lines :] if args.lines else events:
        _print(event, json_out)
    if not args.follow:
        return 0
    try:
        while True:
            time.sleep(FOLLOW_INTERVAL_S)
            for event in scan():
                _print(event, json_out)
    except KeyboardInterrupt:
        return 0


def _flush_running_agents(paths: StatePaths, agent: str | None) -> None:
    """With an orchestrator running on the state root, its agents (or `agent` alone) first
    write the runtime events they hold (an agent writes them in batches, up to a second after
    a turn): then a turn that has answered shows every event. Without one, or if it cannot,
    the files are read as they are."""
    from goondan.cli.client import ControlClient, NotRunning
    from ipc import wire

    try:
        with ControlClient(paths) as client:  # NotRunning at once without a daemon
            client.command(
                "logs.flush",
                wire.LogsFlushArgs(FLUSH_WAIT_MS, [agent] if agent else []),
                FLUSH_WAIT_MS / 1000 + 3,
            )
    except NotRunning:
        return
    except TimeoutError:
        print(
            "goondan: the orchestrator did not answer; its agents' latest events may be missing",
            file=sys.stderr,
        )


def _wanted(event: RuntimeEvent, args: argparse.Namespace) -> bool:
    return (
        (args.agent is None or event.agent_name == args.agent)
        and (args.instance is None or event.instance_key == args.instance)
        and (args.trace is None or event.trace_id.startswith(args.trace))
    )


def _print(event: RuntimeEvent, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(msgspec.json.encode(event).decode() + "\n")
    else:
        sys.stdout.write(render(event) + "\n")
    sys.stdout.flush()


def render(event: RuntimeEvent) -> str:
    """`12:00:01.234 assistant/cli  tool.completed  calc__add ok 3ms  trace=ab12cd34`."""
    clock = event.timestamp[11:23]
    data = dict(event.data)
    details = []
    for key in ("toolName", "stepIndex", "status", "finishReason"):
        if key in data:
            details.append(str(data.pop(key)))
    if "arguments" in data:  # tool.called
        details.append(_one_line(str(data.pop("arguments")), ARGS_WIDTH))
    if isinstance(data.get("progress"), int | float):  # tool.progress
        details.append(f"{data.pop('progress') * 100:.0f}%")
    if data.get("message") and event.type == "tool.progress":
        details.append(_one_line(str(data.pop("message")), ARGS_WIDTH))
    if "duration" in data:
        details.append(f"{data.pop('duration')}ms")
    if "errorMessage" in data:
        details.append(f"error: {data.pop('errorMessage')}")
    if data.get("decidedBy"):  # tool.approval: who approved or denied
        details.append(f"{data.pop('approvalId', '')} by {data.pop('decidedBy')}")
    elif "approvalId" in data:
        details.append(str(data.pop("approvalId")))
    where = f"{event.agent_name}/{event.instance_key}"
    return f"{clock} {where:<28} {event.type:<16} {' '.join(details)}  trace={event.trace_id[:8]}"


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _daemon_log(paths: StatePaths, args: argparse.Namespace) -> int:
    """`logs --daemon`: the daemon's own log (`logs/daemon.log`, JSON lines), its last
    `--lines` lines, then (with -f) what is appended, across rotations."""
    path = paths.daemon_log
    if not path.exists() and not args.follow:
        print(f"goondan: no daemon log at {path}", file=sys.stderr)
        return 1
    source = FileTail(path)
    lines = source.read_new()
    for line in lines[-args.lines :] if args.lines else lines:
        _print_line(line)
    if not args.follow:
        return 0
    try:
        while True:
            time.sleep(FOLLOW_INTERVAL_S)
            for line in source.read_new():
                _print_line(line)
    except KeyboardInterrupt:
        return 0


def _print_line(line: bytes) -> None:
    sys.stdout.write(line.decode(errors="replace") + "\n")
    sys.stdout.flush()
