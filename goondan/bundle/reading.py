"""Reading a bundle's files safely: only regular files, only up to a size limit.

A bundle is read by the daemon at start and on every reload: a FIFO among its files would block
the read until someone writes to it, and a link to `/dev/zero` would fill memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeFile(OSError):
    """A bundle file that is not a regular file, or is over its size limit."""


class TooLarge(UnsafeFile):
    """A regular file over its size limit."""


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of `path` if it is a regular file of at most `limit` bytes, else UnsafeFile.

    Opened without blocking (a FIFO would otherwise wait for a writer) and checked on the
    opened descriptor, so a file swapped in between the check and the read is seen."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{path} is {file_type(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise TooLarge(f"{path} is {info.st_size:,} bytes; the limit is {limit:,}")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew since fstat
                raise TooLarge(f"{path} is over the {limit:,}-byte limit")
        return b"".join(chunks)
    finally:
        os.close(fd)


def file_type(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")
