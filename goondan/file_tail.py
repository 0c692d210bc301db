"""Following a file that is appended to and rotated by size (`NAME` -> `NAME.1`).

`goondan logs` and the studio read the agents' runtime events and the daemon's log this way:
complete lines only (a half-written last line waits for its end), and a rotation loses
nothing written before it, since the rest of the old file is read from `NAME.1`.
"""

from __future__ import annotations

import os
from pathlib import Path

HEAD_BYTES = 64


class FileTail:
    """One file's new complete lines, across rotations.

    The first read returns the whole file, or with `history_bytes` only its newest bytes,
    taken from the rotated file too when the live one is shorter (a cut first line is
    dropped: it is not a whole record)."""

    def __init__(self, path: Path, history_bytes: int | None = None) -> None:
        self.path = path
        self.rotated = path.with_name(path.name + ".1")
        self.history_bytes = history_bytes
        self.offset = 0
        self.inode = 0
        self.partial = b""
        self.head = b""  # the file's first bytes, as last read

    def read_new(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as f:
                info = os.fstat(f.fileno())
                older = b""
                cut = False
                # Two rotations can give the new file the inode number of the one read
                # last; its size or its first bytes tell them apart.
                head = os.pread(f.fileno(), HEAD_BYTES, 0)
                n = min(len(head), len(self.head))
                if (
                    info.st_ino != self.inode
                    or info.st_size < self.offset
                    or head[:n] != self.head[:n]
                ):
                    if self.inode:  # rotated since the last read
                        older, self.offset = self._rest_of_rotated(), 0
                    elif self.history_bytes is not None:
                        older = self._history(info.st_size, self.history_bytes)
                        cut = info.st_size > self.history_bytes
                        self.offset = max(0, info.st_size - self.history_bytes)
                    self.inode = info.st_ino
                self.head = head
                f.seek(self.offset)
                fresh = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(fresh)
        if cut:
            fresh = fresh.split(b"\n", 1)[-1]
        lines = (self.partial + older + fresh).split(b"\n")
        self.partial = lines.pop()
        return [line for line in lines if line.strip()]

    def _history(self, size: int, wanted: int) -> bytes:
        if size >= wanted:
            return b""
        try:
            with open(self.rotated, "rb") as f:
                rotated_size = os.fstat(f.fileno()).st_size
                f.seek(max(0, rotated_size - (wanted - size)))
                data = f.read()
        except FileNotFoundError:
            return b""
        return data.split(b"\n", 1)[1] if rotated_size > wanted - size else data

    def _rest_of_rotated(self) -> bytes:
        try:
            with open(self.rotated, "rb") as f:
                if os.fstat(f.fileno()).st_ino != self.inode:
                    return b""  # rotated more than once since: that part is gone
                f.seek(self.offset)
                return f.read()
        except FileNotFoundError:
            return b""
