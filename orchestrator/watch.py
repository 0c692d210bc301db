"""`goondan run --watch`: reload when a file of the bundle changes.

Polling (once a second) keeps this dependency-free and works on every file system; a bundle is
a handful of files, so a scan costs microseconds.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

_SKIP = {"__pycache__", "node_modules", "dist", ".git", ".venv", "venv"}


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Path -> (mtime_ns, size) of every file under `root` outside hidden or build folders."""
    files: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP and not d.startswith(".")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            files[path] = (info.st_mtime_ns, info.st_size)
    return files


async def watch(root: Path, on_change: Callable[[], Awaitable[object]], interval_s: float) -> None:
    before = snapshot(root)
    while True:
        await asyncio.sleep(interval_s)
        now = snapshot(root)
        if now != before:
            before = now
            await on_change()
