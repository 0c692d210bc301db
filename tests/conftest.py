"""Marks and fixtures shared by every layer of the suite."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).parent / "e2e"

# pytest rewrites every test module's asserts when it imports it, and caches the result only
# where bytecode may be written. Many containers (and this project's CI) set
# PYTHONDONTWRITEBYTECODE, and then every xdist worker rewrote all ~230 modules on every run
# (8.6 s of collection each, against 4.1 with the cache). The processes the tests start keep
# the variable; `make bytecode` compiles the project's own modules.
sys.dont_write_bytecode = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # By directory, so a new end-to-end test cannot forget it: `-m "not e2e"` is the quick run.
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each fsync of this process was for, file or directory (a spy on os.fsync, which
    still syncs)."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced
