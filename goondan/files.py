"""The file operations state shares: append-only logs, and files replaced whole at once (an
agent's instance state, the orchestrator's journals, its run files, the lockfile)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from goondan.paths import StorageError

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT


def open_append(path: Path, *, new_directory: bool = False) -> int:
    """An fd that appends to `path` (0600), creating it and its directories as needed.

    Opens first and creates directories only when that fails: the common case (the directory
    is there) costs one system call, not a mkdir per level. A caller that knows the directory
    is not there yet (`new_directory`) skips the open that would fail."""
    if not new_directory:
        try:
            return os.open(path, _APPEND, 0o600)
        except FileNotFoundError:
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, _APPEND, 0o600)


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(
    path: Path, data: bytes, *, durable: bool = False, mode: int = 0o600, what: str | None = None
) -> None:
    """Make `data` the content of `path` at once (write a temporary file, rename it over), so a
    reader sees the old content or the new, never a part; creates the directory as needed.
    `durable`: fsync'd, file and directory, before it returns, so a power loss leaves the old
    content or the new, never an empty file. `mode` applies to a new file (less the umask).
    A failed write (disk full, I/O error) raises `StorageError`, naming `what` (the file's
    name by default), and leaves the old content."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as out:
            out.write(data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise StorageError(what or path.name, path, exc) from exc
