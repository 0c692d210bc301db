"""A conversation write the disk refuses in the middle of a turn, through a real agent process:
the requester hears `E_STORAGE` (not "a bug in the loop"), nothing of that turn is kept, and
the instance works again with the next request."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from agentproc.conversation import read_messages
from goondan.paths import StatePaths
from tests.unit.agentproc.agent_kit import running_agent


async def test_a_write_refused_once_mid_turn_is_answered_e_storage_and_nothing_half_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk refuses one write (an I/O error): the turn's input and answer, written
    together once the answer is there. The turn's own retry of that write would succeed, but
    the agent drops what memory holds and the disk does not, as for a full disk."""
    real_write = os.write
    refused: list[int] = []

    def write(fd: int, data: bytes) -> int:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if not refused and path.endswith("/a+events.jsonl") and b"hello" in data:
            refused.append(fd)
            raise OSError(errno.EIO, "Input/output error")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    async with running_agent(tmp_path, "You said: {{input}}") as orchestrator:
        failed = await orchestrator.ask("k", "hello")
        assert refused, "the conversation's write was not refused"
        assert failed.status == "error" and failed.error is not None
        assert failed.error.code == "E_STORAGE"
        assert "Input/output error" in failed.error.message
        again = await orchestrator.ask("k", "again")
        assert again.status == "ok" and again.response == "You said: again"
    stored = read_messages(StatePaths.at(tmp_path / "state").conversation_dir("s", "k", "a"))
    assert [m.content for m in stored] == ["again", "You said: again"]
