"""A small real filesystem (tmpfs) to fill up: disk-full tests write to it, not to a mock.

Mounting needs root (as here and in CI), or a user and mount namespace of the test's own
(`unshare -Urm`), which `run_in_namespace` gives a test run by a user without root.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_disk(size: str = "3m", at: Path | None = None) -> Iterator[Path]:
    """A fresh tmpfs of `size` (on the new directory `at`, or a temporary one), unmounted
    and removed afterwards."""
    if os.geteuid() != 0:
        raise AssertionError(
            "mounting a tmpfs needs root: run this test as root or under `unshare -Urm`"
        )
    if at is not None:
        at.mkdir(parents=True)
    # Short on purpose: unix socket paths under it are limited to 107 bytes.
    path = at or Path(tempfile.mkdtemp(prefix="gd-disk-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)
        path.rmdir()


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte with `dd`; the filler file is returned (delete it to free
    the space)."""
    filler = disk / "filler"
    proc = subprocess.run(
        ["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True, text=True
    )
    assert proc.returncode != 0 and "No space left" in proc.stderr, proc.stderr
    # dd's last block may leave part of a page free: use it up byte by byte.
    with open(filler, "ab", buffering=0) as out:
        with contextlib.suppress(OSError):
            while out.write(b"\0" * 512):
                pass
        with contextlib.suppress(OSError):
            while out.write(b"\0"):
                pass
    return filler
