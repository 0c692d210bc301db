"""`cli`: one event per input line (upstream's `stdin_message`).

Reads config INPUT_PATH when set (a regular file is read to its end; a FIFO stays open, so
writers may come and go: `echo hi > the.fifo`), else standard input: the daemon hands its own
stdin and stdout to the first `cli` Connection, so `goondan run` in a terminal is interactive.
The end of the input ends the connector.

A line that is a JSON object supplies `name` | `event`, `text` | `message`, `instanceKey` and
`properties`; any other non-empty line is the text. Empty lines are skipped (config
SKIP_EMPTY_LINES=false keeps them). The instance key defaults to `cli:<line index>` (prefix from
config DEFAULT_INSTANCE_KEY), the event name to `stdin_message` (DEFAULT_EVENT_NAME).

Replies: with config REPLY=true (the default when the input is a terminal) each line waits for
the agent's answer, written to config OUTPUT_PATH (appended) or stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from collections.abc import AsyncGenerator
from typing import IO, Any

from base_tools.connectors._common import flag, setting, text_field
from goondan import ConnectorContext, ReplyFailed, ReplyTimeout, stringify_properties

DEFAULT_EVENT = "stdin_message"
DEFAULT_KEY_PREFIX = "cli"


def normalize_line(
    line: str,
    index: int,
    *,
    default_event: str = DEFAULT_EVENT,
    key_prefix: str = DEFAULT_KEY_PREFIX,
    skip_empty: bool = True,
) -> dict[str, Any] | None:
    """`ctx.emit` keyword arguments for one line, or None to skip it."""
    line = line.rstrip("\r\n")
    trimmed = line.strip()
    if not trimmed and skip_empty:
        return None
    parsed: Any = None
    if trimmed.startswith("{"):
        try:
            parsed = json.loads(trimmed)
        except ValueError:
            parsed = None
    if not isinstance(parsed, dict):
        return {
            "name": default_event,
            "text": line,
            "instance_key": f"{key_prefix}:{index}",
            "properties": {},
        }
    properties = parsed.get("properties")
    return {
        "name": text_field(parsed, "name", "event") or default_event,
        "text": text_field(parsed, "text", "message") or line,
        "instance_key": text_field(parsed, "instanceKey") or f"{key_prefix}:{index}",
        "properties": stringify_properties(
            properties if isinstance(properties, dict) else {}, drop_invalid=True
        ),
    }


async def _pipe_lines(stream: IO[bytes]) -> AsyncGenerator[str, None]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), stream
    )
    try:
        while True:
            raw = await reader.readline()
            if not raw:
                return
            yield raw.decode("utf-8", errors="replace")
    finally:
        transport.close()


async def _file_lines(stream: IO[bytes]) -> AsyncGenerator[str, None]:
    """A regular file (or /dev/null): reads do not block, so no pipe transport is needed."""
    for raw in stream:
        yield raw.decode("utf-8", errors="replace")
        await asyncio.sleep(0)


def _open_input(path: str | None) -> tuple[IO[bytes], bool]:
    """The input stream and whether it is pollable (a pipe, FIFO, terminal or socket)."""
    if path is None:
        stream: IO[bytes] = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    else:
        mode = os.stat(path).st_mode
        if stat.S_ISFIFO(mode):
            # Read-write, so the FIFO never reports EOF when a writer closes it.
            stream = os.fdopen(os.open(path, os.O_RDWR | os.O_NONBLOCK), "rb", buffering=0)
        else:
            stream = open(path, "rb")  # noqa: SIM115 - closed by main
    mode = os.fstat(stream.fileno()).st_mode
    return stream, stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(stream.fileno())


def _reply_output(path: str | None) -> IO[str]:
    if path is None:
        return sys.stdout
    return open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by main


async def main(ctx: ConnectorContext) -> None:
    path = setting(ctx, "INPUT_PATH")
    stream, pollable = _open_input(path)
    interactive = os.isatty(stream.fileno())
    reply = flag(ctx, "REPLY", default=interactive)
    output = _reply_output(setting(ctx, "OUTPUT_PATH")) if reply else None
    options: dict[str, Any] = {
        "default_event": setting(ctx, "DEFAULT_EVENT_NAME", "defaultEventName") or DEFAULT_EVENT,
        "key_prefix": setting(ctx, "DEFAULT_INSTANCE_KEY", "defaultInstanceKey")
        or DEFAULT_KEY_PREFIX,
        "skip_empty": flag(ctx, "SKIP_EMPTY_LINES", "skipEmptyLines", default=True),
    }
    lines = _pipe_lines(stream) if pollable else _file_lines(stream)
    ctx.logger.info("[cli] reading", input=path or "stdin", reply=reply)
    index = 0
    try:
        while True:
            if interactive and output is not None:
                output.write("> ")
                output.flush()
            line = await ctx.unless_stopping(anext(lines, None))
            if line is None:
                break
            event = normalize_line(line, index, **options)
            index += 1
            if event is None:
                continue
            if output is None:
                await ctx.emit(**event)
                continue
            try:
                answer = (await ctx.request(**event)).text
            except (ReplyFailed, ReplyTimeout) as exc:
                answer = f"[error {exc.code}] {exc.message}"
            output.write(answer + "\n")
            output.flush()
    finally:
        await lines.aclose()
        stream.close()
        if output is not None and output is not sys.stdout:
            output.close()
    ctx.logger.info("[cli] end of input", lines=index)
