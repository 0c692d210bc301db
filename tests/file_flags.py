"""The inode flags of a directory as e2fsprogs reads them, apart from the code under test."""

from __future__ import annotations

import subprocess
from pathlib import Path


def lsattr(directory: Path) -> str:
    """The flags `lsattr -d` prints for `directory`: `T` among them once its new directories
    are placed apart (`goondan.files.place_new_directories_apart`)."""
    listed = subprocess.run(["lsattr", "-d", str(directory)], check=True, capture_output=True)
    return listed.stdout.decode().split()[0]
