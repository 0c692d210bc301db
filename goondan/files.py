"""The file operations state shares: append-only logs, and files replaced whole at once (an
agent's instance state, the orchestrator's journals, its run files, the lockfile)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
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


def file_system_type(path: Path) -> str | None:
    """The type of the file system `path` is on, or would be made on (its nearest existing
    directory's): `ext4`, `xfs`, `tmpfs`, ..., from the mount table (`/proc/self/mountinfo`,
    by device); None where there is none to read."""
    while not path.exists() and path.parent != path:
        path = path.parent
    device = os.stat(path).st_dev
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                # id parent major:minor root mountpoint options [optional...] - type source ...
                if len(fields) > 6 and fields[2] == wanted and "-" in fields[6:]:
                    return fields[fields.index("-", 6) + 1]
    except OSError:
        pass
    return None


def file_fsync_syncs_new_entries(directory: Path) -> bool:
    """Whether, on the file system of `directory`, the fsync of a file that was created or
    renamed into a directory, and held open since, makes that entry durable too (and its
    directory's entry, if just made): then a `fsync_dir` after it only repeats the work, a
    few synchronous writes each, and at scale the fsyncs of quiet conversations are most of
    their disk work (docs/performance.md, figure 7).

    ext4 does. Without a journal, adding an entry (a create or a rename) marks the inode
    (`EXT4_STATE_NEWENTRY`), and its fsync writes the parent directory's blocks and inode,
    and goes on up while the parents are marked too; the mark lives with the inode in
    memory, which an open file keeps there. With a journal, the fsync commits every
    transaction up to the file's last change, and so the create or rename before it.
    Elsewhere POSIX asks for the directory's own fsync."""
    return file_system_type(directory) == "ext4"


# The inode flags' ioctl(2)s (linux/fs.h: FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, on 64-bit Linux;
# the kernel reads and writes an int) and FS_TOPDIR_FL, `chattr +T`.
_GET_FLAGS = 0x80086601
_SET_FLAGS = 0x40086602
_TOPDIR = 0x00020000


def skips_recently_freed_inodes(path: Path) -> bool:
    """Whether `path` is on ext4 without a journal, whose inode allocator skips every inode
    freed in the last minutes, at a cost each, looking again from the first inode of the
    group for every new one: after a large deletion a new file or directory there costs ten
    times its usual, or more (docs/performance.md, "New conversations and ext4"). Read from
    sysfs (`/sys/fs/ext4/<device>/journal_task` is `<none>` without a journal)."""
    device = os.stat(path).st_dev
    try:
        block = os.readlink(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
        journal = Path("/sys/fs/ext4", os.path.basename(block), "journal_task").read_text()
    except OSError:  # not a block device's ext4 (tmpfs, xfs, overlay, ...)
        return False
    return journal.strip() == "<none>"


def place_new_directories_apart(directory: Path) -> bool:
    """Where the file system skips recently freed inodes (`skips_recently_freed_inodes`), ask
    it to place the directories made in `directory` as it places unrelated top-level trees
    (`chattr +T`): in a group with few directories and many free inodes, not in the parent's
    group. A tree made beside a large deletion (as the bench's state roots were, after a test
    run) has its directories and files follow it there, and each pays for every inode the
    deletion freed: right after 20,000 deletions a new conversation's spare cost 72-83 µs per
    inode placed apart and 327-619 beside them. Placing one costs a search through every
    group (on a quiet disk 68-74 µs against 29), so where nothing is skipped it is not asked,
    and the agents place batches of spares, not each one. Whether it was asked; never
    raises."""
    try:
        if not skips_recently_freed_inodes(directory):
            return False
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, _GET_FLAGS, struct.pack("i", 0)))[0]
        if not flags & _TOPDIR:
            fcntl.ioctl(fd, _SET_FLAGS, struct.pack("i", flags | _TOPDIR))
        return True
    except OSError:  # EPERM (not the owner), EOPNOTSUPP: the allocator decides alone
        return False
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
