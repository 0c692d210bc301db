"""When an input from `goondan send` reaches the disk, in a daemon running in this process (real
agent processes, the real `control.sock`): fsync'd before it is routed with `--durability
fsync`; by default routed at once and fsync'd only if still unanswered after
`storage.journal_sync_after_s`."""

import asyncio
from pathlib import Path

import msgspec
import uvloop

from goondan.paths import StatePaths
from goondan.settings import DEFAULTS, Durability
from orchestrator.journal import Journal
from tests.integration.in_process_daemon import send, serving_daemon


def run_daemon_and_send(
    directory: Path, durability: Durability, sync_after_s: float, fsynced: list[str]
) -> tuple[list[str], list[str]]:
    """Two `send`s, the second to a running agent; the journal's fsyncs (this process's: the
    agents are processes of their own) by each one's answer."""
    storage = msgspec.structs.replace(
        DEFAULTS.storage, durability=durability, journal_sync_after_s=sync_after_s
    )
    settings = msgspec.structs.replace(DEFAULTS, storage=storage)
    paths = StatePaths.at(directory / "state")
    journal = str(paths.journal_file)

    async def scenario() -> tuple[list[str], list[str]]:
        loop = asyncio.get_running_loop()
        async with serving_daemon(paths, settings):
            await loop.run_in_executor(None, send, paths, "What is 1 plus 2?")
            first = [f for f in fsynced if f == journal]
            fsynced.clear()
            answer = await loop.run_in_executor(None, send, paths, "What is 3 plus 4?")
            assert "7" in answer
            second = [f for f in fsynced if f == journal]
        return first, second

    return uvloop.run(scenario())


def test_by_default_an_input_answered_at_once_is_routed_without_an_fsync(
    directory: Path, process_state: None, fsynced: list[str]
) -> None:
    first, second = run_daemon_and_send(directory, "os", 30.0, fsynced)
    assert first == second == []
    # Answered, so nothing is left to replay after any crash.
    assert Journal(StatePaths.at(directory / "state").journal_file).recover() == []


def test_by_default_an_input_still_unanswered_after_the_delay_is_fsynced(
    directory: Path, process_state: None, fsynced: list[str]
) -> None:
    # The first send starts the agents, which takes far longer than the delay.
    first, _ = run_daemon_and_send(directory, "os", 0.001, fsynced)
    assert len(first) == 1


def test_with_durability_fsync_every_input_is_fsynced_at_once(
    directory: Path, process_state: None, fsynced: list[str]
) -> None:
    first, second = run_daemon_and_send(directory, "fsync", 30.0, fsynced)
    assert len(first) == len(second) == 1
