"""structlog set-up: readable lines on a TTY, JSON lines otherwise (journald, files).

Logs go to stderr (stdout is reserved for what a command answers) and, in the daemon, also
as JSON lines to `<state-root>/logs/daemon.log` (`LogFile`: rotated by size, written by a
thread of its own). A detached daemon has no stderr worth writing to: it logs to the file
only, and what its children print reaches the same file through an `OutputPipe`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json as jsonlib
import logging
import os
import select
import sys
import threading
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, WrappedLogger

# Keys every log line of the running turn carries (instanceKey, traceId, turnId): one context
# variable set per turn, cheaper than structlog's one variable per key.
log_context: ContextVar[dict[str, str] | None] = ContextVar("goondan_log_context", default=None)

# Lines waiting for the writer thread, at most. A disk slower than the daemon logs makes the
# newest lines wait here, then dropped (and counted), rather than make the event loop wait.
QUEUE_BYTES = 4 * 1024 * 1024
# A line a child prints without a newline is cut into records of this size.
MAX_LINE_BYTES = 64 * 1024
# The children's pipe holds this much when the daemon reads late (the kernel's default: 64 KiB).
PIPE_BYTES = 1024 * 1024
# Lines a child prints outside its log (a traceback, written line by line) that come within
# this of each other make one record.
TEXT_GATHER_S = 0.1


def _merge_log_context(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    context = log_context.get()
    if context:
        for key, value in context.items():
            event.setdefault(key, value)
    return event


def configure_logging(
    level: str | None = None,
    *,
    json: bool | None = None,
    log_file: LogFile | None = None,
    stderr: bool = True,
) -> None:
    """Log at `level` to stderr (unless `stderr` is False) and, with `log_file`, as JSON lines
    to that file too."""
    level_name = (level or os.environ.get("GOONDAN_LOG_LEVEL") or "info").upper()
    numeric = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    if json is None:
        json = not sys.stderr.isatty()
    to_json = structlog.processors.JSONRenderer()
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        _merge_log_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    if log_file is None:  # one destination: structlog's own printer, as it always was
        processors.append(
            to_json if json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        )
        # One write per line (print() makes two, the line then its newline): the daemon's
        # processes share one stderr, and with unbuffered output (PYTHONUNBUFFERED, common in
        # containers) another process's line could land between them.
        factory: Any = structlog.WriteLoggerFactory(file=sys.stderr)
    else:
        console = None if json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        factory = _TeeLoggerFactory(sys.stderr if stderr else None, console, log_file)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )


# The log methods whose lines `record_last_error` keeps (add_log_level's "error", "critical").
_ERROR_METHODS = frozenset({"error", "err", "exception", "critical", "fatal"})
# The longest error line kept for `status`.
LAST_ERROR_CHARS = 300


class _LastErrorFile:
    """Writes the summary of each error-level event (its message and the last line of its
    error or traceback) over `path`, so the daemon can say why this process died even after
    a SIGKILL. Errors are rare: other lines cost one set lookup."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
        if method in _ERROR_METHODS:
            detail = event.get("exception") or event.get("error")
            text = str(event.get("event", ""))
            if detail:
                lines = [line.strip() for line in str(detail).splitlines() if line.strip()]
                text = f"{text}: {lines[-1]}" if lines else text
            with contextlib.suppress(OSError):  # no record is better than a failed log line
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, text[:LAST_ERROR_CHARS].encode(errors="replace"))
                finally:
                    os.close(fd)
        return event


def record_last_error(path: Path) -> None:
    """Keep this process's last error-level log line in `path`, for the daemon's `status`
    (call after `configure_logging` and `install_redaction`: it sees the redacted line)."""
    processors = list(structlog.get_config()["processors"])
    processors.insert(max(0, len(processors) - 1), _LastErrorFile(path))
    structlog.configure(processors=processors)


class _TeeLogger:
    """Writes each event as a JSON line to the log file, and to stderr as `console` renders
    it (the same JSON line without one). The chain ends with the event dict, so each
    destination renders it its own way."""

    def __init__(self, stderr: TextIO | None, console: Any, log_file: LogFile) -> None:
        self._stderr = stderr
        self._console = console
        self._file = log_file
        self._json = structlog.processors.JSONRenderer()

    def msg(self, /, **event: Any) -> None:
        line = str(self._json(None, "", event))  # before the console renderer, which pops keys
        self._file.write((line + "\n").encode())
        if self._stderr is not None:
            text = line if self._console is None else self._console(None, "", event)
            try:  # one write per line, as `configure_logging` says why
                self._stderr.write(text + "\n")
                self._stderr.flush()
            except OSError:  # stderr gone or full: the file has the line
                pass

    log = debug = info = warn = warning = error = err = critical = exception = fatal = msg


class _TeeLoggerFactory:
    def __init__(self, stderr: TextIO | None, console: Any, log_file: LogFile) -> None:
        self._logger = _TeeLogger(stderr, console, log_file)

    def __call__(self, *args: Any) -> _TeeLogger:
        return self._logger


def _record(event: str, level: str, **fields: Any) -> bytes:
    """A JSON line as the daemon's log writes them, for lines made outside structlog."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    return (
        jsonlib.dumps({"event": event, **fields, "level": level, "timestamp": stamp}) + "\n"
    ).encode()


class LogFile:
    """A log file rotated by size (`daemon.log` -> `daemon.log.1` -> ... up to `files` of
    them), written by a thread of its own.

    `write` only queues: a slow disk never holds up the caller (the event loop). A write that
    fails (a full disk, a removed directory) drops its lines instead of raising; once writing
    works again, a `log lines dropped` record says how many were lost. So do lines that find
    the queue full."""

    def __init__(self, path: Path, *, max_bytes: int, files: int) -> None:
        self.path = path
        self._max_bytes = max_bytes
        self._files = files
        self._cond = threading.Condition(threading.Lock())
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._dropped = 0  # lines, since the last that were written
        self._closed = False
        self._fd: int | None = None
        self._size = 0
        self._thread = threading.Thread(target=self._run, name="goondan log writer", daemon=True)
        self._thread.start()

    def write(self, data: bytes) -> None:
        """Queue whole lines (one or more, each ending in a newline) for the file."""
        with self._cond:
            if self._closed or self._pending_bytes + len(data) > QUEUE_BYTES:
                self._dropped += data.count(b"\n")
                return
            self._pending.append(data)
            self._pending_bytes += len(data)
            if len(self._pending) == 1:
                self._cond.notify()

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued (for at most `timeout_s`) and close the file."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                batch, self._pending, self._pending_bytes = self._pending, [], 0
                dropped, self._dropped = self._dropped, 0
                closed = self._closed
            if dropped:
                batch.insert(0, _record("log lines dropped", "warning", count=dropped))
            self._write_batch(batch)
            if closed and not batch:
                break
        self._close_fd()

    def _write_batch(self, batch: list[bytes]) -> None:
        """Write the batch in as few writes as the rotation allows, rotating the file before
        an item that would take it past `max_bytes` (a larger item fills a file alone)."""
        chunk: list[bytes] = []
        size = 0
        for item in batch:
            if self._fd is None:
                self._open_or_drop(item)
                if self._fd is None:
                    continue
            if self._size + size + len(item) > self._max_bytes and self._size + size > 0:
                if chunk:
                    self._write(b"".join(chunk))
                    chunk, size = [], 0
                if self._size > 0:
                    self._rotate()
                    self._open_or_drop(item)
                    if self._fd is None:
                        continue
            chunk.append(item)
            size += len(item)
        if chunk:
            self._write(b"".join(chunk))

    def _write(self, data: bytes) -> None:
        start = self._size
        try:
            if self._fd is None:
                raise OSError("the log file is not open")
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                self._size += written
                view = view[written:]
        except OSError:
            self._drop(data)
            if self._fd is not None and self._size > start:  # no torn line for the next to join
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, start)
            self._close_fd()  # reopened for the next lines: the file may be gone

    def _drop(self, data: bytes) -> None:
        with self._cond:
            self._dropped += data.count(b"\n")

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _open_or_drop(self, item: bytes) -> None:
        try:
            self._open()
        except OSError:
            self._drop(item)

    def _open(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._size = os.fstat(self._fd).st_size

    def _rotate(self) -> None:
        self._close_fd()
        with contextlib.suppress(OSError):  # a failed rename: the next lines go on appending
            rotate_files(self.path, self._files)


def rotate_files(path: Path, files: int) -> None:
    """`path` becomes `path.1`, `path.1` becomes `path.2`, ...; `files` are kept in all."""
    if files <= 1:
        path.unlink(missing_ok=True)
        return
    for n in range(files - 2, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{n + 1}"))
    if path.exists():
        path.replace(path.with_name(f"{path.name}.1"))


class OutputPipe:
    """The standard output and error of a detached daemon's children (the agent template,
    agents, connectors): a pipe that a thread reads into the daemon's log file.

    Their JSON log lines go in as they are; anything else they print (a traceback as they
    crash) becomes `{"event": "process output", "text": ...}` records, so the file stays JSON
    lines. A pipe, not the file itself: the daemon's log is rotated and bounded, and a full
    disk fails the daemon's write (dropped), not the child's. The reader only queues, so a
    slow disk does not make children wait on their stderr."""

    def __init__(self, log_file: LogFile) -> None:
        self._log_file = log_file
        self._read_fd, self.write_fd = os.pipe()
        with contextlib.suppress(OSError):  # bursts wait in the pipe while we read late
            fcntl.fcntl(self.write_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self._thread = threading.Thread(target=self._run, name="goondan output reader", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop taking output once the children are gone (after their last lines)."""
        os.close(self.write_fd)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        partial = b""
        text: list[str] = []  # lines that are not JSON, held to make one record of them
        while True:
            if text and not select.select([self._read_fd], [], [], TEXT_GATHER_S)[0]:
                self._log_file.write(_text_record(text))  # the rest is not coming soon
                text = []
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            lines, sep, partial = (partial + chunk).rpartition(b"\n")
            if sep:
                self._forward(lines.split(b"\n"), text)
            if len(partial) > MAX_LINE_BYTES:
                self._forward([partial], text)
                partial = b""
        if partial:
            self._forward([partial], text)
        if text:
            self._log_file.write(_text_record(text))
        os.close(self._read_fd)

    def _forward(self, lines: list[bytes], text: list[str]) -> None:
        """JSON lines go to the file at once; other lines join `text`, which a JSON line
        (or a pause) closes as one record."""
        out: list[bytes] = []
        for line in lines:
            if line.startswith(b"{") and line.endswith(b"}"):
                if text:
                    out.append(_text_record(text))
                    text.clear()
                out.append(line + b"\n")
            elif line.strip():
                text.append(line.decode(errors="replace"))
        if out:
            self._log_file.write(b"".join(out))


def _text_record(lines: list[str]) -> bytes:
    return _record("process output", "warning", text="\n".join(lines))
