"""An agent keeps a bounded number of conversations loaded: a burst of new conversations, faster
than they go quiet, must not run the process out of file descriptors (each loaded conversation
holds its event log and runtime-event log open)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from agentproc.conversation import read_messages
from goondan.paths import StatePaths
from goondan.settings import Settings
from tests.unit.agentproc.agent_kit import running_agent

LOADED = 8
CONVERSATIONS = 120


# Instances past the limit are unloaded once their fsync returns: beside another test worker
# writing to the same disk, the syncs lag the burst and more files stay open than it allows.
@pytest.mark.serial
async def test_a_burst_of_new_conversations_stays_within_the_open_files_limit(
    tmp_path: Path,
) -> None:
    settings = Settings.from_mapping({"agent": {"max_loaded_instances": LOADED}})
    agent = running_agent(tmp_path, "You said: {{input}}", settings=settings)
    async with agent as orchestrator:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        in_use = len(os.listdir("/proc/self/fd"))
        # Room for the bounded conversations (two files each) and some slack, far less than
        # CONVERSATIONS would need if every one stayed open until it went quiet (seconds).
        resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 4 * LOADED + 16, hard))
        try:
            answers = [await orchestrator.ask(f"k{i}", f"hello k{i}") for i in range(CONVERSATIONS)]
            opened = len(os.listdir("/proc/self/fd")) - in_use
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert [a.status for a in answers] == ["ok"] * CONVERSATIONS
        assert answers[-1].response == f"You said: hello k{CONVERSATIONS - 1}"
        assert opened <= 2 * LOADED + 8
        # Unloaded, not lost: every conversation is on disk, and a later turn picks it up.
        paths = StatePaths.at(tmp_path / "state")
        for key in ("k0", f"k{CONVERSATIONS // 2}"):
            stored = read_messages(paths.conversation_dir("s", key, "a"))
            assert [m.role for m in stored] == ["user", "assistant"]
        again = await orchestrator.ask("k0", "hello k0")
        assert again.status == "ok"
        stored = read_messages(paths.conversation_dir("s", "k0", "a"))
        assert [m.content for m in stored] == ["hello k0", "You said: hello k0"] * 2
