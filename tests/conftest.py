"""Marks and fixtures shared by every layer of the suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

E2E = Path(__file__).parent / "e2e"


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
