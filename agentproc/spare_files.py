"""New conversations' files, made ahead while the agent has nothing to do.

A new conversation needs an events file (`instances/<key>/<agent>+events.jsonl`) and, for a
new instance key, the key's directory: one or two new inodes on the path of its first answer.
On ext4 a new inode costs a look through the inode table past every inode freed in the last
minutes, up to a millisecond after a large deletion (docs/performance.md, figure 7). So the
agent keeps a few spares, each a directory holding an empty events file of the agent's,

    <state-root>/swarms/<swarm>/spares/<agent>/<pid>-<batch>/<n>/<agent>+events.jsonl

and a new conversation renames one into place, which makes no inode: the directory becomes
the key's when the key has none, or the file alone moves into the key's directory. Each spare's
file stays open, so the conversation's first write opens nothing; and for a new key the rename
is the look for its directory too (it fails when the directory is there): one system call
where a look, a rename, an open and a stat were four. The spares are made again after a turn
has answered, one inode at a time (`make_one`). They outlive their process: the agent's next
process (a restart, a respawn after a crash) takes over those of its processes that are gone,
renaming each to its own name, so stopping and starting an agent neither deletes nor makes an
inode (on that file system a deletion slows every inode made in the minutes after it, in any
process).

Spares live beside `instances/`, on its file system (a rename cannot cross one), where nothing
that lists instances looks. Where that is ext4 without a journal, the agent's spares directory
asks for the batches in it to be placed apart from the inodes a large deletion has just freed
(`goondan.files.place_new_directories_apart`): beside them each new inode pays for all of
them. A batch holds up to `SPARES_PER_BATCH` spares, made beside it: placing each spare
apart would cost a search through every block group and a cold one's bitmaps each time
(docs/performance.md, "Spares in batches"). A batch is removed once its last spare is gone.
A spare is empty until it is in place, so a crash leaves at worst an empty conversation, as a
crash between making the file and writing to it always could.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from goondan.files import open_append, place_new_directories_apart

CLAIMED = ".claimed"  # the suffix of a spare's file between `_open_file`'s renames
SPARES_PER_BATCH = 64


class SpareFiles:
    def __init__(self, directory: Path, instances: Path, events_name: str, *, count: int) -> None:
        """`directory`: the agent's in the swarm's `spares/`; `instances`: the swarm's
        `instances/`, where spares go; `events_name`: the name its conversations' events files
        have; `count`: how many to keep (0: none, every new conversation makes its files)."""
        self._directory = directory
        self._instances = instances
        self._batch_prefix = f"{directory}/{os.getpid()}-"  # a new batch's path, less its number
        self._events_name = events_name
        self._count = count
        # Spares holding an empty events file, each with the file open: a new conversation
        # appends to it as it is, with no open of its own. Paths as text: a `Path` made per
        # spare costs a new conversation microseconds of cold pure-Python code.
        self._ready: list[tuple[str, int]] = []
        self._emptied: list[str] = []  # spares whose file went into a key's directory
        self._batch: str | None = None  # where new spares are made
        self._in_batch = SPARES_PER_BATCH  # spares made in it (none yet: start one)
        self._batches = 0  # batch names this process has taken
        self._earlier_batches: list[str] = []  # removed once their spares are gone
        self._adopted = False

    def place(self, key_dir: str | Path) -> int | None:
        """Make `key_dir`, a new instance key's directory, by renaming a spare onto it: the
        open fd of the empty events file it holds, or None when no spare is ready (or the
        rename fails for another reason: the caller makes the files as before). The rename
        is also the look for the key's directory: FileExistsError when it is there (an
        older conversation of the key's, or another agent's), and the spare stays ready."""
        if not self._ready:
            return None
        spare, fd = self._ready[-1]
        try:
            os.rename(spare, key_dir)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise FileExistsError(exc.errno, exc.strerror, str(key_dir)) from exc
            self._discard(self._ready.pop())
            return None
        self._ready.pop()
        return fd

    def take(self, events_path: Path, *, key_has_directory: bool) -> int | None:
        """Put an empty events file at `events_path` by renaming a spare into place (the
        whole spare when the key has no directory yet, else its file alone: other agents'
        conversations are there): its open fd. None when none is ready or the rename fails:
        the caller makes the file as before."""
        if not key_has_directory:
            with contextlib.suppress(FileExistsError):  # made meanwhile by another agent
                return self.place(events_path.parent)
        if not self._ready:
            return None
        spare, fd = self._ready.pop()
        try:
            os.rename(f"{spare}/{self._events_name}", events_path)
        except OSError:
            self._discard((spare, fd))
            return None
        self._emptied.append(spare)
        return fd

    def wanted(self) -> bool:
        return len(self._ready) < self._count

    def file_is_next(self) -> bool:
        """Whether `make_one`'s next step is a spare's file alone (~30 µs on a cold cache, a
        directory several times that): the spare whose file went into a key's directory."""
        return self._adopted and bool(self._emptied)

    def refill(self) -> None:
        """Make spares up to `count`, all at once (`make_one` until it has nothing to do)."""
        while self.make_one():
            pass

    def make_one(self) -> bool:
        """One new inode toward `count`: a spare's directory (with its batch's, when a batch
        starts), or the file of a spare that lacks one. False when none is wanted, or when it
        failed (a full disk): it stops quietly, new conversations then make their own files
        and report the disk's error if it lasts. An agent makes its spares one step per
        wake-up: after a large deletion one inode can take hundreds of microseconds, and a
        request that arrives meanwhile waits for the step, not for every spare."""
        try:
            if not self._adopted:
                self._adopt()
            if len(self._ready) >= self._count:
                return False
            if not self._emptied:
                self._remove_empty_batches()
                self._emptied.append(self._new_directory())
                return True
            spare = self._emptied.pop()
            try:
                fd = self._open_file(f"{spare}/{self._events_name}")
            except OSError:
                self._emptied.append(spare)  # filled later, here or by the next process
                raise
            self._ready.append((spare, fd))
            return True
        except OSError:
            return False

    def close(self) -> None:
        """Close the spares' files; the spares stay, for the agent's next process."""
        for _, fd in self._ready:
            os.close(fd)
        self._ready.clear()
        self._emptied.clear()

    @staticmethod
    def _open_file(path: str) -> int:
        """The spare's events file, open, and new to the file system: made here, or, where a
        process gone before left it, renamed away and back once open. The file system then
        counts its entry as just made, as for a file made here, and where an fsync of the
        file makes such entries durable (ext4: `goondan.files.file_fsync_syncs_new_entries`)
        the conversation it becomes needs no fsync of its directories."""
        try:
            return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        fd = open_append(Path(path))
        try:
            away = path + CLAIMED
            os.rename(path, away)
            os.rename(away, path)
        except OSError:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _discard(ready: tuple[str, int]) -> None:
        spare, fd = ready
        os.close(fd)
        shutil.rmtree(spare, ignore_errors=True)

    def _new_directory(self) -> str:
        if self._batch is None or self._in_batch >= SPARES_PER_BATCH:
            if self._batch is not None:
                self._earlier_batches.append(self._batch)
            self._batch = self._new_batch()
            self._in_batch = 0
        self._in_batch += 1
        spare = f"{self._batch}/{self._in_batch}"
        os.mkdir(spare)
        return spare

    def _new_batch(self) -> str:
        while True:  # a name a process gone before us, under the same pid, may have left
            batch = self._next_batch_name()
            try:
                os.mkdir(batch)
                return batch
            except FileExistsError:
                continue

    def _next_batch_name(self) -> str:
        self._batches += 1
        return f"{self._batch_prefix}{self._batches}"

    def _remove_empty_batches(self) -> None:
        """The earlier batches whose spares are all gone. Every spare in a batch of ours is
        one of `_ready` or `_emptied` (made here, or taken over by `_claim`), so a batch
        holding one is not asked: a failed rmdir is a system call and an exception on a
        refill's step, which a request may be waiting for."""
        if not self._earlier_batches:
            return
        held = {spare.rpartition("/")[0] for spare, _ in self._ready}
        held.update(spare.rpartition("/")[0] for spare in self._emptied)
        for batch in [b for b in self._earlier_batches if b not in held]:
            try:
                os.rmdir(batch)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    continue
            self._earlier_batches.remove(batch)

    def _adopt(self) -> None:
        """Take over the batches of this agent's processes that are gone: each renamed to one
        of ours, so that one process alone gets it, its spares filled by `refill` (a spare's
        file is opened where it is there, made where it is not). A spare with anything in its
        file (none should have: a spare's file is written only once it is in place) is
        removed, and so is anything in a batch that is not a spare."""
        self._adopted = True
        # The key directories a spare becomes go into `instances/`: it must be there.
        self._instances.mkdir(parents=True, exist_ok=True)
        self._directory.mkdir(parents=True, exist_ok=True)
        place_new_directories_apart(self._directory)
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self._directory):
                pid, _, _ = entry.name.partition("-")
                if pid.isdigit() and entry.is_dir(follow_symlinks=False) and not _alive(int(pid)):
                    self._claim(entry.path)

    def _claim(self, batch: str) -> None:
        while True:
            ours = self._next_batch_name()
            try:
                os.rename(batch, ours)
                break
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    continue  # a name of ours left by an earlier process with our pid
                return  # another process of the agent took it first
        self._earlier_batches.append(ours)
        for entry in os.scandir(ours):
            if entry.is_dir(follow_symlinks=False):
                self._take_over(entry.path)
            else:
                os.unlink(entry.path)

    def _take_over(self, spare: str) -> None:
        events = f"{spare}/{self._events_name}"
        # A process gone between `_open_file`'s two renames left the file under its other name.
        with contextlib.suppress(FileNotFoundError):
            os.rename(events + CLAIMED, events)
        try:
            written = os.stat(events).st_size > 0
        except FileNotFoundError:
            written = False
        if written:
            shutil.rmtree(spare, ignore_errors=True)
        else:
            self._emptied.append(spare)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
