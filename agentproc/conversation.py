"""A conversation on disk, event sourced: a base and its events.

Where: beside the instance's directory `instances/<key>/<agent>/`, in the instance key's
directory, as `<agent>+events.jsonl` and `<agent>+base.jsonl` (`+` is in no storage name, so no
agent's files can take another's name). A new conversation makes one file, not a directory and a
file: on ext4 a directory's inode costs several times a file's, most of all in the minutes after
many files were deleted. The instance's directory holds what else it keeps (extension state,
long-running tool records), made when first written. Conversations stored before this layout,
`base.jsonl` and `events.jsonl` inside the instance's directory, are read and written where
they are (`goondan.paths.conversation_files`, where the layout is read by all).

Every message change during a turn (append, and the replace / remove / truncate extensions
emit) is written to `events.jsonl` (to the OS, before the loop moves on), so an agent crash
loses nothing. The one exception is an append made with `hold=True` (a turn's input): it goes
out with the next change or `flush()`, so a turn that only answers costs one write; an input
lost with a crash before then is delivered again by the orchestrator.

`sync()` makes the events durable (fsync), and the directory entries that hold them; the agent
calls it when an instance goes quiet. With `fsync_events` every write is durable before it
returns. `fold()` writes a new base atomically (write, fsync, rename) and only then
empties the events; the agent calls it when the events grow large (it rewrites the whole
conversation). Before the rename it appends a `folded` marker naming the new base (its size
and CRC-32): a crash after the rename but before the events are emptied leaves events that
the base already holds, and loading skips them rather than replaying them twice. Loading
replays base + events, cuts a torn last line a crash left, and gives every tool call that never
got a result a synthetic error result, written back to disk, so the conversation stays valid
for the provider.
"""

from __future__ import annotations

import contextlib
import os
import threading
import zlib
from pathlib import Path
from typing import Literal

import msgspec

from agentproc.messages import Message
from agentproc.spare_files import SpareFiles
from goondan.files import fsync_dir, open_append
from goondan.paths import BASE_SUFFIX, EVENTS_SUFFIX, StorageError, conversation_files
from ipc.error_codes import ErrorCode

INTERRUPTED = (
    f'{{"status":"error","error":{{"code":"{ErrorCode.E_TOOL_INTERRUPTED}","message":'
    '"The agent process stopped before this tool call finished."}}'
)


class MessageEvent(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="op"):
    pass


class Append(MessageEvent, frozen=True, tag="append"):
    message: Message


class Truncate(MessageEvent, frozen=True, tag="truncate"):
    pass


class Replace(MessageEvent, frozen=True, tag="replace"):
    target_id: str
    message: Message


class Remove(MessageEvent, frozen=True, tag="remove"):
    target_id: str


class Folded(MessageEvent, frozen=True, tag="folded"):
    """The events before this one are in the base of this size and CRC-32 (see `fold`)."""

    base_bytes: int
    base_crc: int


AnyEvent = Append | Truncate | Replace | Remove | Folded
_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(AnyEvent)
_message_decoder = msgspec.json.Decoder(Message)


# What a conversation knows of its events file's place, so that a new one costs no look:
# "unknown" until `stored` looks; "no key directory" for a new instance key (the file and the
# key's directory are both to be made); "no file" when the key's directory is there but the
# file is not; "there" once it is known to be there, or opened.
FilesState = Literal["unknown", "no key directory", "no file", "there"]


class Conversation:
    def __init__(
        self,
        directory: Path,
        *,
        fsync_events: bool = False,
        new: bool = False,
        spares: SpareFiles | None = None,
        events_fd: int | None = None,
        fsync_syncs_new_entries: bool = False,
    ) -> None:
        """`directory` is the instance's (`instances/<key>/<agent>`): the conversation's
        files go beside it (see the module doc; `stored` finds older ones). `new`: the caller
        knows the instance key's directory is not there, so nothing is stored: the first
        write makes the directory without first trying to open the file in it. `spares`: the
        agent's files made ahead, one of which a new conversation's first write takes.
        `events_fd`: the caller put a spare in place as the key's new directory (`new`
        implied); this appends to its events file, open and empty.
        `fsync_syncs_new_entries`: the file system makes a file's new entries durable with
        its fsync (`goondan.files.file_fsync_syncs_new_entries`): the entries of a file this
        conversation put in place then need no fsync of their directories."""
        self.directory = directory
        # Both made on first use: a new conversation writes through a spare's open file, and
        # a path costs microseconds on the cold caches its first request meets.
        self._events_path: Path | None = None
        self._base_path: Path | None = None
        self._legacy = False  # stored inside the instance's directory, the older layout
        self._files: FilesState = (
            "there" if events_fd is not None else "no key directory" if new else "unknown"
        )
        self._spares = spares
        self._fsync_events = fsync_events
        self._events_fd = events_fd
        self._events_end = 0  # the events file's size, while `_events_fd` is open
        self.messages: list[Message] = []
        self._requests: dict[str, int] | None = None  # requestId -> index of its user message
        self._dirty = False  # changed since the last sync or fold
        self._dir_synced = False  # the directory's entries (new files) made durable
        self._fsync_syncs_new_entries = fsync_syncs_new_entries
        # The events file's entry was made (created or renamed into place) by this object,
        # whose fd has held the file open since: its fsync makes the entry durable where the
        # file system does so (above).
        self._entry_made_here = events_fd is not None
        self.events_bytes = 0  # in events.jsonl: since the last fold
        self._held: list[bytes] = []  # encoded events not yet written (see `hold`)
        self._fold_lock = threading.Lock()

    @property
    def events_path(self) -> Path:
        if self._events_path is None:
            self._events_path = self.directory.with_name(self.directory.name + EVENTS_SUFFIX)
        return self._events_path

    @property
    def base_path(self) -> Path:
        if self._base_path is None:
            self._base_path = self.directory.with_name(self.directory.name + BASE_SUFFIX)
        return self._base_path

    @property
    def dirty(self) -> bool:
        return self._dirty

    def load(self) -> list[Message]:
        if self._files == "unknown":
            self.stored()  # which layout
        data = _read(self.events_path)
        self.messages, whole = _replay(_read(self.base_path), data)
        self._requests = None
        if whole < len(data):  # cut the torn line, so new events start on a line of their own
            os.truncate(self.events_path, whole)
        self.events_bytes = whole
        self._dirty = whole > 0  # perhaps never synced before the process stopped
        if _answer_dangling_tool_calls(self.messages):
            self._dirty = True
            self.fold()
        return self.messages

    def stored(self) -> bool:
        """Whether this conversation is on disk: beside the instance's directory, or inside it
        in the older layout (then it stays there: its files are read and written in place)."""
        if self.events_path.exists() or self.base_path.exists():
            self._files = "there"
            return True
        if self.directory.is_dir():  # perhaps the older layout
            self._base_path, self._events_path, self._legacy = conversation_files(self.directory)
        if self._legacy:
            self._files = "there"  # read and written in place, never from a spare
        elif self._files == "unknown":
            self._files = "no file"
        return self._legacy

    def request_position(self, request_id: str) -> int | None:
        """Index of the user message that started request `request_id`, if any (a replay).
        Kept up to date on appends; rebuilt after the rarer edits."""
        if self._requests is None:
            self._requests = {}
            for index, message in enumerate(self.messages):
                self._index_request(index, message)
        return self._requests.get(request_id)

    def _index_request(self, index: int, message: Message) -> None:
        if self._requests is not None and message.role == "user" and message.metadata:
            request_id = message.metadata.get("requestId")
            if isinstance(request_id, str) and request_id:
                self._requests[request_id] = index

    def append(self, message: Message, *, hold: bool = False) -> None:
        """With `hold`, the event is written with the next one (or `flush()`), not now."""
        self.messages.append(message)
        self._index_request(len(self.messages) - 1, message)
        self._write_event(Append(message), hold=hold)

    def flush(self) -> None:
        """Write the held events, if any."""
        if self._held:
            self._write(b"".join(self._held))
            self._held.clear()

    def drop_unwritten(self) -> None:
        """Forget the events a failed write left held (the caller reloads from the disk)."""
        self._held.clear()

    def truncate(self) -> None:
        self.messages.clear()
        self._requests = None
        self._write_event(Truncate())

    def replace(self, target_id: str, message: Message) -> bool:
        """Put `message` where the message `target_id` is; False when there is none."""
        event = Replace(target_id, message)
        self._requests = None
        if not _apply(self.messages, event):
            return False
        self._write_event(event)
        return True

    def remove(self, target_id: str) -> bool:
        """Drop the message `target_id`; False when there is none."""
        event = Remove(target_id)
        self._requests = None
        if not _apply(self.messages, event):
            return False
        self._write_event(event)
        return True

    def sync(self) -> None:
        """Make every event so far durable (fsync). Thread-safe against itself and `fold`."""
        with self._fold_lock:
            if not self._dirty:
                return
            self.flush()
            os.fsync(self._events_fd if self._events_fd is not None else self._open_events())
            self._sync_directories()
            self._dirty = False

    def fold(self) -> None:
        """Make base = base + events, atomically, then clear the events. Thread-safe against
        itself and `sync` (a fold in a worker thread cut off by shutdown meets the last sync)."""
        with self._fold_lock:
            self._fold()

    def _fold(self) -> None:
        if not (self._dirty or self.events_bytes or self._held):
            return
        self.events_path.parent.mkdir(parents=True, exist_ok=True)  # held events only
        base = b"".join([_encoder.encode(message) + b"\n" for message in self.messages])
        tmp = self.base_path.with_suffix(".jsonl.tmp")
        with open(tmp, "wb") as out:
            out.write(base)
            out.flush()
            os.fsync(out.fileno())
        self._held.clear()  # in the new base
        # Durable before the new base is: from the rename on, the events say they are in it.
        marker = Folded(len(base), zlib.crc32(base))
        self._write(_encoder.encode(marker) + b"\n", durable=True)
        os.replace(tmp, self.base_path)
        fsync_dir(self.base_path.parent)
        self._close_events()
        with open(self.events_path, "wb"):
            pass
        self._dirty = False
        self.events_bytes = 0

    def close(self) -> None:
        self.flush()
        self._close_events()

    def _write_event(self, event: AnyEvent, *, hold: bool = False) -> None:
        self._held.append(_encoder.encode(event) + b"\n")
        self._dirty = True
        if not hold:
            self.flush()

    def _open_events(self) -> int:
        files, spares = self._files, self._spares
        fd = None
        if files in ("no key directory", "no file") and spares is not None:
            fd = spares.take(self.events_path, key_has_directory=files == "no file")
        if fd is None:
            fd = open_append(self.events_path, new_directory=files == "no key directory")
            self._events_end = os.fstat(fd).st_size  # only this process appends to it
        else:
            self._events_end = 0
        self._events_fd = fd
        self._entry_made_here = files in ("no key directory", "no file")
        self._files = "there"
        return fd

    def _write(self, data: bytes, *, durable: bool = False) -> None:
        fd = self._events_fd
        if fd is None:
            try:
                fd = self._open_events()
            except OSError as exc:
                raise StorageError("the conversation", self.events_path, exc) from exc
        # One write() for the lot: it reaches the OS before we return, so a crash keeps it.
        try:
            written = os.write(fd, data)
            while written < len(data):  # short on a full disk: the next write says why
                written += os.write(fd, data[written:])
            if durable or self._fsync_events:
                os.fsync(fd)
                if self._fsync_events:  # a power loss must not lose the new file either
                    self._sync_directories()
        except OSError as exc:
            # No torn line is left behind: the events stay held for the next write.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._events_end)
            raise StorageError("the conversation", self.events_path, exc) from exc
        self._events_end += len(data)
        self.events_bytes += len(data)

    def _sync_directories(self) -> None:
        """Make durable, once, the entries a new conversation made: its events file and the
        instance key's directory (`instances/<key>/<agent>+events.jsonl`), and in the older
        layout the instance's directory between them."""
        if not self._dir_synced and self._entry_made_here and self._fsync_syncs_new_entries:
            self._dir_synced = True  # by the events file's fsync, just done
        if not self._dir_synced:
            home = self.events_path.parent
            fsync_dir(home)
            fsync_dir(home.parent)
            if self._legacy:
                fsync_dir(home.parent.parent)
            self._dir_synced = True

    def _close_events(self) -> None:
        if self._events_fd is not None:
            os.close(self._events_fd)
            self._events_fd = None
            self._entry_made_here = False  # unpinned: the file system may forget it is new


def read_messages(directory: Path) -> list[Message]:
    """The conversation of the instance directory `directory` (`instances/<key>/<agent>`) as
    stored (base + events, in either layout), without repairing or writing anything."""
    base, events, _ = conversation_files(directory)
    messages, _ = _replay(_read(base), _read(events))
    return messages


def _replay(base: bytes, events: bytes) -> tuple[list[Message], int]:
    """The messages of base + events, and how many bytes of the events are whole and readable
    (a torn last line from a crash, or an unreadable one, ends the replay). At a `folded`
    marker naming this very base, the events before it are in the base already (a fold cut
    short before it emptied them): the replay starts over from the base there."""
    folded: list[Message] = [
        _message_decoder.decode(line) for line in base.splitlines() if line.strip()
    ]
    messages = list(folded)
    whole = 0
    for line in events.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break  # a torn last line from a crash: everything before it is intact
        if line.strip():
            try:
                event = _event_decoder.decode(line)
            except msgspec.DecodeError:
                break
            if not isinstance(event, Folded):
                _apply(messages, event)
            elif event.base_bytes == len(base) and event.base_crc == zlib.crc32(base):
                messages = list(folded)
        whole += len(line)
    return messages, whole


def _apply(messages: list[Message], event: Append | Truncate | Replace | Remove) -> bool:
    """Apply one event; False for a replace/remove whose target is not there (ignored)."""
    if isinstance(event, Append):
        messages.append(event.message)
    elif isinstance(event, Truncate):
        messages.clear()
    else:
        index = next((i for i, m in enumerate(messages) if m.id == event.target_id), None)
        if index is None:
            return False
        if isinstance(event, Replace):
            messages[index] = event.message
        else:
            del messages[index]
    return True


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _answer_dangling_tool_calls(messages: list[Message]) -> bool:
    """Insert an error result after every tool call that has none. Returns True if any."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    repaired: list[Message] = []
    changed = False
    for message in messages:
        repaired.append(message)
        for call in message.tool_calls:
            if call.id not in answered:
                repaired.append(
                    Message(
                        id=f"{message.id}-interrupted-{call.id}",
                        role="tool",
                        content=INTERRUPTED,
                        tool_call_id=call.id,
                    )
                )
                changed = True
    if changed:
        # Results must directly follow their assistant message; rebuild in that order.
        by_call = {m.tool_call_id: m for m in repaired if m.role == "tool"}
        ordered: list[Message] = []
        for message in repaired:
            if message.role == "tool":
                continue
            ordered.append(message)
            ordered.extend(by_call[c.id] for c in message.tool_calls if c.id in by_call)
        messages[:] = ordered
    return changed
