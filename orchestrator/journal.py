"""The journal of inputs accepted from outside (CLI `send`, connectors) and not yet answered.

An input is appended before it is routed, and marked done when it is answered; after an
orchestrator crash the unanswered ones are delivered again under their original request id,
so an agent can recognise a replay. A line written to the OS survives any process crash; its
fsync, which a power loss needs, comes before anything is acknowledged. An input acknowledged
as soon as it is routed (a connector's event, `accept_durably`) is routed once its fsync has
returned: one fsync, in a thread, for every such input appended while the one before ran, so
the event loop never waits on the disk and a burst of events shares a few fsyncs. One whose
requester hears nothing before its answer (`goondan send`, on this machine's `control.sock`)
is fsync'd `sync_after_s` later, one fsync for every input accepted meanwhile and still
unanswered; one answered sooner needs none: a power loss that would lose its line would take
its requester along.

The file is compacted to the open entries at start-up, and while running each time it has
grown by `compact_bytes` (a daemon up for months must not keep every input it ever answered).

A write that fails (disk full, I/O error) raises `StorageError` and leaves the file as it was:
a partial line is cut off again, or, when even that fails, the next line starts on a line of
its own, and `recover` skips a line it cannot read instead of stopping there.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec
import structlog

from goondan.files import replace_file
from goondan.paths import StorageError
from goondan.settings import DEFAULTS


class Entry(msgspec.Struct, frozen=True):
    op: Literal["accept", "done"]
    id: str
    frame: bytes = b""  # the delegate envelope as received (msgpack)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Entry)


class Journal:
    def __init__(
        self,
        path: Path,
        *,
        fsync: bool = True,
        compact_bytes: int = DEFAULTS.storage.journal_compact_bytes,
        sync_after_s: float = DEFAULTS.storage.journal_sync_after_s,
    ) -> None:
        self.path = path
        self._fsync = fsync
        self._compact_bytes = compact_bytes
        self._sync_after_s = sync_after_s
        self._fd: int | None = None
        self._open: dict[str, Entry] = {}  # unanswered, in the order they were accepted
        self._unsynced: set[str] = set()  # of those, taken by `accept` and not yet fsync'd
        self._sync_timer: asyncio.TimerHandle | None = None
        self._grown = 0  # bytes appended since the file was last rewritten
        # `accept_durably`'s lines, numbered as appended: those waiting for an fsync (with the
        # number of each) and how many of them are durable (any fsync of the file counts).
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self._appended = 0
        self._synced = 0
        self._syncing: asyncio.Task[None] | None = None

    def recover(self) -> list[Entry]:
        """Unanswered inputs of earlier runs, in the order they were accepted."""
        accepted: dict[str, Entry] = {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                entry = _decoder.decode(line)
            except msgspec.DecodeError:
                continue  # a torn line: the input it held was never acknowledged
            if entry.op == "accept":
                accepted[entry.id] = entry
            else:
                accepted.pop(entry.id, None)
        self._open = accepted
        with contextlib.suppress(StorageError):  # the file as it is holds every open entry
            self._rewrite()
        return list(accepted.values())

    def accept(self, request_id: str, frame: bytes) -> None:
        """Append an input for a requester that hears nothing before its answer: fsync'd
        `sync_after_s` later if it is still unanswered then (module doc). `StorageError` if
        the append fails."""
        entry = Entry("accept", request_id, frame)
        self._append(entry)
        self._open[request_id] = entry
        if self._fsync:
            self._unsynced.add(request_id)
            if self._sync_timer is None:
                self._sync_timer = asyncio.get_running_loop().call_later(
                    self._sync_after_s, self._sync_unanswered
                )

    def accept_durably(self, request_id: str, frame: bytes) -> asyncio.Future[None]:
        """Append an input now (`StorageError` if that fails) and fsync it in a thread: the
        future is done once it is durable, or fails with `StorageError`. At `close` it is
        cancelled: the line stays, and the next run delivers it."""
        entry = Entry("accept", request_id, frame)
        self._append(entry)
        self._open[request_id] = entry
        loop = asyncio.get_running_loop()
        durable: asyncio.Future[None] = loop.create_future()
        if not self._fsync:
            durable.set_result(None)
            return durable
        self._appended += 1
        self._waiting.append((self._appended, durable))
        if self._syncing is None:
            self._syncing = loop.create_task(self._sync_waiting(), name="journal fsync")
        return durable

    def when_durable(
        self,
        durable: asyncio.Future[None],
        request_id: str,
        route: Callable[[], None],
        refuse: Callable[[StorageError], None],
    ) -> None:
        """Once `durable` (from `accept_durably`) is done: `route()` the input, or, if its
        fsync failed, mark it done (refused now, it must not be delivered by the next run)
        and `refuse(error)`. Neither when it was cancelled: the next run delivers it."""

        def done(durable: asyncio.Future[None]) -> None:
            if durable.cancelled():
                return
            failure = durable.exception()
            if failure is None:
                route()
                return
            with contextlib.suppress(StorageError):
                self.done(request_id)
            if not isinstance(failure, StorageError):  # `_sync_waiting` sets no other
                failure = StorageError("the journal", self.path, OSError(str(failure)))
            refuse(failure)

        durable.add_done_callback(done)

    async def _sync_waiting(self) -> None:
        """fsync what `accept_durably` appended until nothing waits; the lines appended
        during one fsync share the next (group commit). The thread syncs a duplicate of the
        file's descriptor, so a compaction that replaces the file meanwhile cannot close it
        under the thread (the compaction syncs the old file and writes the new one durably)."""
        batch: list[tuple[int, asyncio.Future[None]]] = []
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                last = batch[-1][0]
                failure: StorageError | None = None
                if self._synced < last:
                    if self._fd is None:  # closed after its own fsync, which failed
                        error = OSError(errno.EIO, "the journal could not be fsync'd")
                        failure = StorageError("the journal", self.path, error)
                    else:
                        try:
                            await asyncio.to_thread(_fsync_copy, os.dup(self._fd))
                            self._synced = max(self._synced, last)
                        except OSError as exc:
                            failure = StorageError("the journal", self.path, exc)
                for _, durable in batch:
                    if not durable.done():
                        if failure is None:
                            durable.set_result(None)
                        else:
                            durable.set_exception(failure)
                batch = []
        except asyncio.CancelledError:  # `close`: the lines stay for the next run
            for _, durable in batch:
                durable.cancel()
            raise
        finally:
            self._syncing = None

    def done(self, request_id: str) -> None:
        self._unsynced.discard(request_id)
        if self._open.pop(request_id, None) is not None:
            # Not fsync'd: losing it only means one more (recognised) redelivery.
            self._append(Entry("done", request_id))
            if self._grown > self._compact_bytes:
                with contextlib.suppress(StorageError):  # the line is written; compact later
                    self._rewrite()

    def entry(self, request_id: str) -> Entry | None:
        """The accepted, unanswered input `request_id`, if there is one."""
        return self._open.get(request_id)

    def close(self) -> None:
        """Close the file; inputs still waiting for their fsync get it first. Inputs accepted
        with `accept_durably` and not yet told so are left to the next run (cancelled)."""
        self._sync_unanswered()
        self._close_file()
        if self._syncing is not None:
            self._syncing.cancel()
        for _, durable in self._waiting:
            durable.cancel()
        self._waiting.clear()

    def _sync_unanswered(self) -> None:
        """One fsync for the unanswered inputs taken by `accept`, or by `accept_durably`,
        and not yet fsync'd."""
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        if (not self._unsynced and self._synced == self._appended) or self._fd is None:
            return
        self._unsynced.clear()
        try:
            os.fsync(self._fd)
            self._synced = self._appended
        except OSError as exc:  # written to the OS still: only a power loss could lose them
            structlog.get_logger().error(
                "could not fsync the journal", path=str(self.path), error=str(exc)
            )

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _append(self, entry: Entry) -> None:
        """Append one line, or raise `StorageError` with the file as it was before."""
        line = _encoder.encode(entry) + b"\n"
        try:
            fd = self._fd if self._fd is not None else self._open_for_append()
            start = os.lseek(fd, 0, os.SEEK_END)
        except OSError as exc:
            raise StorageError("the journal", self.path, exc) from exc
        try:
            written = 0
            while written < len(line):  # a short write is retried, so ENOSPC shows as an error
                written += os.write(fd, line[written:])
        except OSError as exc:
            self._cut_back(fd, start)
            raise StorageError("the journal", self.path, exc) from exc
        self._grown += len(line)

    def _open_for_append(self) -> int:
        """Open the file; a tail left torn by an earlier run gets its line ended first."""
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                os.write(fd, b"\n")
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        return fd

    def _cut_back(self, fd: int, start: int) -> None:
        """Remove a partly written line; when that fails too, reopen before the next append,
        which then ends the torn line first."""
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        self._sync_unanswered()  # the lines before the torn one
        self._close_file()

    def _rewrite(self) -> None:
        """Replace the file with the open entries (written and fsync'd before the rename, so
        a crash leaves either file, and both hold every open entry). On a failed write the
        old file stays, and `StorageError` is raised."""
        # The old file, synced: it must hold every open entry until the rename.
        self._sync_unanswered()
        self._close_file()
        lines = [_encoder.encode(entry) + b"\n" for entry in self._open.values()]
        replace_file(self.path, b"".join(lines), durable=True, what="the journal")
        self._grown = 0


def _fsync_copy(fd: int) -> None:
    """fsync a duplicate of the journal's descriptor, then close it (in a thread)."""
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
