"""What `/proc` says about a process: its title, its children (as `ps` would show them) and
what it has open (as `ls -l /proc/PID/fd`)."""

from __future__ import annotations

import os
from pathlib import Path


def title(pid: int) -> str:
    """The process's title (`setproctitle`'s, else its command), or "" once it has ended."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:  # it has just ended
        return ""


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        if entry.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def open_files(pid: int) -> dict[str, str]:
    """`{fd: what it is open on}` (a path, `pipe:[...]`, `socket:[...]`). An fd closed while
    the list is read is left out: tests wait for files to close, so that race is expected."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
    return found
