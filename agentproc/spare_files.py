"""New conversations' files, made ahead while the agent has nothing to do.

A new conversation needs an events file (`instances/<key>/<agent>+events.jsonl`) and, for a
new instance key, the key's directory: one or two new inodes on the path of its first answer.
On ext4 a new inode costs a look through the inode table past every inode freed in the last
minutes, up to a millisecond after a large deletion (docs/performance.md, figure 7). So the
agent keeps a few spares, each a directory holding an empty events file of the agent's,

    <state-root>/swarms/<swarm>/spares/<agent>/<pid>-<n>/<agent>+events.jsonl

and a new conversation renames one into place, which makes no inode: the directory becomes
the key's when the key has none, or the file alone moves into the key's directory. Each spare's
file stays open, so the conversation's first write opens nothing; and for a new key the rename
is the look for its directory too (it fails when the directory is there): one system call
where a look, a rename, an open and a stat were four. The spares
are made again after a turn has answered, and removed when the agent stops; those of an agent
process that is gone (killed) are removed by the next process of the agent.

Spares live beside `instances/`, on its file system (a rename cannot cross one), where nothing
that lists instances looks. A spare is empty until it is in place, so a crash leaves at worst
an empty conversation, as a crash between making the file and writing to it always could.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from goondan.files import open_append


class SpareFiles:
    def __init__(self, directory: Path, instances: Path, events_name: str, *, count: int) -> None:
        """`directory`: the agent's in the swarm's `spares/`; `instances`: the swarm's
        `instances/`, where spares go; `events_name`: the name its conversations' events files
        have; `count`: how many to keep (0: none, every new conversation makes its files)."""
        self._directory = directory
        self._instances = instances
        self._prefix = f"{os.getpid()}-"
        self._events_name = events_name
        self._count = count
        # Spares holding an empty events file, each with the file open: a new conversation
        # appends to it as it is, with no open of its own.
        self._ready: list[tuple[Path, int]] = []
        self._emptied: list[Path] = []  # spares whose file went into a key's directory
        self._made = 0
        self._swept = False

    def place(self, key_dir: Path) -> int | None:
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
            os.rename(spare / self._events_name, events_path)
        except OSError:
            self._discard((spare, fd))
            return None
        self._emptied.append(spare)
        return fd

    def wanted(self) -> bool:
        return len(self._ready) < self._count

    def refill(self) -> None:
        """Make spares up to `count`. A failure (a full disk) stops it quietly: new
        conversations then make their own files, and report the disk's error if it lasts."""
        try:
            if not self._swept:
                self._sweep()
            while len(self._ready) < self._count:
                spare = self._emptied.pop() if self._emptied else self._new_directory()
                try:
                    fd = open_append(spare / self._events_name)
                except OSError:
                    self._emptied.append(spare)  # removed at close, or filled later
                    raise
                self._ready.append((spare, fd))
        except OSError:
            return

    def close(self) -> None:
        for ready in self._ready:
            self._discard(ready)
        for spare in self._emptied:
            shutil.rmtree(spare, ignore_errors=True)
        self._ready.clear()
        self._emptied.clear()

    @staticmethod
    def _discard(ready: tuple[Path, int]) -> None:
        spare, fd = ready
        os.close(fd)
        shutil.rmtree(spare, ignore_errors=True)

    def _new_directory(self) -> Path:
        self._made += 1
        spare = self._directory / f"{self._prefix}{self._made}"
        spare.mkdir(parents=True)
        return spare

    def _sweep(self) -> None:
        """Remove the spares of this agent's processes that are gone."""
        self._swept = True
        # The key directories a spare becomes go into `instances/`: it must be there.
        self._instances.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self._directory):
                pid, _, _ = entry.name.partition("-")
                if pid.isdigit() and not _alive(int(pid)):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
