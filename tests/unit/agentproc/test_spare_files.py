"""New conversations' files made ahead (`agentproc.spare_files`): a new conversation renames a
spare into place, spares are made again after a turn, and the agent's next process takes over
those its earlier processes left."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from agentproc import process
from agentproc.conversation import read_messages
from agentproc.spare_files import SPARES_PER_BATCH, SpareFiles
from goondan.files import skips_recently_freed_inodes
from goondan.paths import StatePaths
from goondan.settings import DEFAULTS
from tests.file_flags import lsattr
from tests.unit.agentproc.agent_kit import (
    AGENT,
    OTHERS_EVENTS,
    SWARM,
    key_another_agent_uses,
    running_agent,
)

EVENTS = f"{AGENT}+events.jsonl"


def gone_pid() -> int:
    """The pid of a process that has ended (an earlier process of the agent, for the spares
    it left)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(gone.stdout)


def spare_dirs(paths: StatePaths) -> list[Path]:
    """The agent's spares, in its batches (`spares/<agent>/<pid>-<batch>/<n>/`)."""
    home = paths.swarm(SWARM).spares / AGENT
    return sorted(s for b in home.iterdir() for s in b.iterdir()) if home.is_dir() else []


async def spares_made_again(paths: StatePaths) -> list[Path]:
    """The agent's spares once it has made them again, each with its file, which it does a
    little after an answer (`agentproc.process.SPARES_REFILL_DELAY_S`)."""
    deadline = time.monotonic() + 5.0
    while True:
        spares = spare_dirs(paths)
        ready = [s for s in spares if (s / EVENTS).exists()]
        if len(ready) == DEFAULTS.agent.spare_conversations or time.monotonic() > deadline:
            return spares
        await asyncio.sleep(0.001)


async def test_an_agents_spares_are_spread_over_the_file_system(tmp_path: Path) -> None:
    """On ext4 without a journal the agent asks for its batches of spares to be placed as
    unrelated trees are, away from the inodes a large deletion has just freed
    (`goondan.files.place_new_directories_apart`)."""
    paths = StatePaths.at(tmp_path / "state")
    async with running_agent(tmp_path, "You said: {{input}}") as orchestrator:
        assert (await orchestrator.ask("first", "one")).status == "ok"
        assert len(await spares_made_again(paths)) == DEFAULTS.agent.spare_conversations
    home = paths.swarm(SWARM).spares / AGENT
    if skips_recently_freed_inodes(tmp_path):  # ext4 without a journal, as this project's CI
        assert "T" in lsattr(home)
        # The conversation a spare became is not: its own directories stay beside it.
        assert "T" not in lsattr(paths.instance_dir(SWARM, "first"))


async def test_new_conversations_take_spares_made_after_a_turn(tmp_path: Path) -> None:
    paths = StatePaths.at(tmp_path / "state")
    shared = key_another_agent_uses(paths, "shared")
    async with running_agent(tmp_path, "You said: {{input}}") as orchestrator:
        assert (await orchestrator.ask("first", "one")).status == "ok"
        spares = await spares_made_again(paths)
        assert len(spares) == DEFAULTS.agent.spare_conversations
        assert all([p.name for p in s.iterdir()] == [EVENTS] for s in spares)
        assert all((s / EVENTS).stat().st_size == 0 for s in spares)

        # A key with no directory gets a spare as its directory, file and all.
        assert (await orchestrator.ask("fresh", "two")).status == "ok"
        fresh = paths.instance_dir(SWARM, "fresh")
        assert [p.name for p in fresh.iterdir()] == [EVENTS]
        stored = read_messages(paths.conversation_dir(SWARM, "fresh", AGENT))
        assert [m.content for m in stored] == ["two", "You said: two"]

        # A key other agents use gets the spare's file alone; theirs is untouched.
        assert (await orchestrator.ask("shared", "three")).status == "ok"
        assert sorted(p.name for p in shared.iterdir()) == [EVENTS, "other+events.jsonl"]
        assert (shared / "other+events.jsonl").read_bytes() == OTHERS_EVENTS
        stored = read_messages(paths.conversation_dir(SWARM, "shared", AGENT))
        assert [m.content for m in stored] == ["three", "You said: three"]

        # Made again after each turn, and never shared with a conversation.
        spares = await spares_made_again(paths)
        assert len(spares) == DEFAULTS.agent.spare_conversations
        assert all((s / EVENTS).stat().st_size == 0 for s in spares)
    # Kept when the agent stops, empty, for its next process: a deletion costs every inode
    # made in the minutes after it on ext4 without a journal.
    spares = spare_dirs(paths)
    assert len(spares) == DEFAULTS.agent.spare_conversations
    assert all((s / EVENTS).stat().st_size == 0 for s in spares)


async def test_a_spares_file_alone_is_made_again_with_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation whose key had its directory took a spare's file alone: the agent makes
    that file again right after its answer (cheaper than a wake-up later); a spare's directory
    waits for the refill's timer, here far away."""
    paths = StatePaths.at(tmp_path / "state")
    key_another_agent_uses(paths, "shared")
    async with running_agent(tmp_path, "You said: {{input}}") as orchestrator:
        assert (await orchestrator.ask("first", "zero")).status == "ok"
        await spares_made_again(paths)
        monkeypatch.setattr(process, "SPARES_REFILL_DELAY_S", 60.0)
        assert (await orchestrator.ask("shared", "one")).status == "ok"
        spares = spare_dirs(paths)
        assert len(spares) == DEFAULTS.agent.spare_conversations
        assert all((s / EVENTS).stat().st_size == 0 for s in spares)
        assert (await orchestrator.ask("fresh", "two")).status == "ok"
        # The spare became the new key's directory: the next one's waits for the timer.
        assert len(spare_dirs(paths)) == DEFAULTS.agent.spare_conversations - 1


async def test_no_spares_when_turned_off(tmp_path: Path) -> None:
    paths = StatePaths.at(tmp_path / "state")
    settings = msgspec.structs.replace(
        DEFAULTS, agent=msgspec.structs.replace(DEFAULTS.agent, spare_conversations=0)
    )
    async with running_agent(tmp_path, "You said: {{input}}", settings=settings) as orchestrator:
        for key in ("k1", "k2"):
            assert (await orchestrator.ask(key, "hi")).status == "ok"
        assert spare_dirs(paths) == []
        stored = read_messages(paths.conversation_dir(SWARM, "k2", AGENT))
        assert [m.content for m in stored] == ["hi", "You said: hi"]


def test_the_spares_of_a_process_that_is_gone_are_taken_over(tmp_path: Path) -> None:
    home = tmp_path / "swarm" / "spares" / AGENT
    instances = tmp_path / "swarm" / "instances"
    gone = gone_pid()
    batch = home / f"{gone}-1"
    dead, emptied, written = (batch / str(n) for n in (1, 2, 3))
    alive = home / f"{os.getppid()}-1" / "1"  # another process of the agent, still running
    for spare in (dead, written, alive):
        spare.mkdir(parents=True)
        (spare / EVENTS).touch()
    emptied.mkdir()  # its file went into a key's directory
    (written / EVENTS).write_bytes(OTHERS_EVENTS)  # none should be: removed, not reused
    (batch / "stray").touch()  # not a spare: removed
    not_a_batch = home / f"{gone}-9"
    not_a_batch.touch()  # a file: left alone
    inode = (dead.stat().st_ino, (dead / EVENTS).stat().st_ino)
    spares = SpareFiles(home, instances, EVENTS, count=2)
    spares.refill()
    assert instances.is_dir()  # where spares go, made beforehand
    [ours] = [b for b in home.iterdir() if b != alive.parent and b.is_dir()]
    assert ours.name.partition("-")[0] == str(os.getpid())
    assert sorted(p.name for p in ours.iterdir()) == ["1", "2"]  # nothing else, nothing new
    assert all([f.name for f in p.iterdir()] == [EVENTS] for p in ours.iterdir())
    assert all((p / EVENTS).stat().st_size == 0 for p in ours.iterdir())
    assert inode == ((ours / "1").stat().st_ino, (ours / "1" / EVENTS).stat().st_ino)
    assert (alive / EVENTS).exists()  # not ours to take
    for key in ("k1", "k2"):  # both are used, with nothing made for them
        assert spares.take(instances / key / EVENTS, key_has_directory=False) is not None
        assert [p.name for p in (instances / key).iterdir()] == [EVENTS]
    assert spares.take(instances / "k3" / EVENTS, key_has_directory=False) is None  # none left
    spares.refill()  # the batch taken over, now empty, is removed; new spares are made
    [new] = [b for b in home.iterdir() if b != alive.parent and b.is_dir()]
    assert new != ours and sorted(p.name for p in new.iterdir()) == ["1", "2"]
    assert not_a_batch.is_file()
    spares.close()


def test_spares_are_made_in_batches_each_removed_once_used_up(tmp_path: Path) -> None:
    """A spare is made beside the others of its batch (a search through the file system's
    groups for each batch, not for each spare); a batch whose spares are all gone is
    removed."""
    home = tmp_path / "swarm" / "spares" / AGENT
    instances = tmp_path / "swarm" / "instances"
    spares = SpareFiles(home, instances, EVENTS, count=1)
    for n in range(SPARES_PER_BATCH + 1):
        spares.refill()
        fd = spares.place(instances / f"k{n}")
        assert fd is not None
        os.close(fd)
    spares.refill()
    [batch] = home.iterdir()  # the first batch, used up, is gone
    assert batch.name == f"{os.getpid()}-2"
    assert [p.name for p in batch.iterdir()] == ["2"]
    assert [p.name for p in (instances / "k0").iterdir()] == [EVENTS]
    assert len(list(instances.iterdir())) == SPARES_PER_BATCH + 1
    spares.close()


def test_a_spare_left_between_its_files_two_renames_is_taken_over_whole(tmp_path: Path) -> None:
    """A process gone while it renamed its spare's file away and back (to mark it new) left
    it under the other name: the next process takes it back, and no stray file goes into the
    key directory the spare becomes."""
    home = tmp_path / "swarm" / "spares" / AGENT
    instances = tmp_path / "swarm" / "instances"
    spare = home / f"{gone_pid()}-1" / "1"
    spare.mkdir(parents=True)
    (spare / f"{EVENTS}.claimed").touch()
    inode = (spare / f"{EVENTS}.claimed").stat().st_ino
    spares = SpareFiles(home, instances, EVENTS, count=1)
    spares.refill()
    [batch] = home.iterdir()
    [ours] = batch.iterdir()
    assert [f.name for f in ours.iterdir()] == [EVENTS]
    assert (ours / EVENTS).stat().st_ino == inode  # the same file, not a new one beside it
    assert spares.take(instances / "k" / EVENTS, key_has_directory=False) is not None
    assert [p.name for p in (instances / "k").iterdir()] == [EVENTS]
    spares.close()


def test_spares_are_made_one_inode_at_a_time(tmp_path: Path) -> None:
    """An agent makes one inode per wake-up (`make_one`), so that a request arriving in the
    middle waits for one inode's time on a slow disk, not for the whole refill."""
    home = tmp_path / "swarm" / "spares" / AGENT
    instances = tmp_path / "swarm" / "instances"
    spares = SpareFiles(home, instances, EVENTS, count=2)

    def made() -> list[list[str]]:
        return [sorted(p.name for p in s.iterdir()) for b in home.iterdir() for s in b.iterdir()]

    assert spares.make_one()  # the first spare's directory (and its batch)
    assert made() == [[]]
    assert spares.make_one()  # its file
    assert made() == [[EVENTS]]
    assert spares.wanted()
    assert spares.make_one() and spares.make_one()
    assert made() == [[EVENTS], [EVENTS]]
    assert not spares.wanted()
    assert not spares.make_one()  # nothing more to make
    assert made() == [[EVENTS], [EVENTS]]
    fd = spares.take(instances / "k" / EVENTS, key_has_directory=False)
    assert fd is not None
    os.close(fd)
    assert spares.wanted() and spares.make_one()
    spares.close()


def test_a_failed_refill_leaves_new_conversations_to_make_their_files(tmp_path: Path) -> None:
    blocker = tmp_path / "swarm" / "spares"
    blocker.parent.mkdir(parents=True)
    blocker.write_bytes(b"")  # a file where the spares' directory should be
    spares = SpareFiles(blocker / AGENT, tmp_path / "swarm" / "instances", EVENTS, count=2)
    spares.refill()  # no exception: the agent goes on
    assert spares.wanted()
    assert not spares.make_one()  # a failed step says so: the agent does not try again at once
    assert (
        spares.take(tmp_path / "swarm" / "instances" / "k" / EVENTS, key_has_directory=False)
        is None
    )


def test_a_spare_whose_file_could_not_be_made_is_left_unused(tmp_path: Path) -> None:
    home = tmp_path / "swarm" / "spares" / AGENT
    instances = tmp_path / "swarm" / "instances"
    spares = SpareFiles(home, instances, "x" * 300, count=1)  # a name no file system takes
    spares.refill()  # the directory is made, its file is not: no exception
    assert spares.wanted()
    assert spares.take(instances / "k" / "x", key_has_directory=False) is None
    spares.close()
    [batch] = home.iterdir()
    assert [list(p.iterdir()) for p in batch.iterdir()] == [[]]  # for a later try


def one_spare(tmp_path: Path) -> tuple[StatePaths, SpareFiles]:
    """A state root, and the agent's spares with one made."""
    paths = StatePaths.at(tmp_path / "state")
    swarm = paths.swarm(SWARM)
    spares = SpareFiles(swarm.spares / AGENT, swarm.instances, EVENTS, count=1)
    spares.refill()
    return paths, spares


def test_a_key_directory_made_meanwhile_gets_the_spares_file_alone(tmp_path: Path) -> None:
    paths, spares = one_spare(tmp_path)
    # Not there when the instance was made, there by its first write (another agent's).
    key_dir = key_another_agent_uses(paths, "k")
    assert spares.take(key_dir / EVENTS, key_has_directory=False) is not None
    assert sorted(p.name for p in key_dir.iterdir()) == [EVENTS, "other+events.jsonl"]
    assert (key_dir / "other+events.jsonl").read_bytes() == OTHERS_EVENTS
    spares.close()


def test_a_spare_placed_as_a_new_keys_directory_comes_with_its_file_open(tmp_path: Path) -> None:
    paths, spares = one_spare(tmp_path)
    fd = spares.place(paths.instance_dir(SWARM, "new"))
    assert fd is not None
    os.write(fd, b"appended\n")
    os.close(fd)
    assert (paths.instance_dir(SWARM, "new") / EVENTS).read_bytes() == b"appended\n"
    assert spares.place(paths.instance_dir(SWARM, "another")) is None  # none left
    spares.close()


def test_placing_a_spare_where_the_key_has_a_directory_keeps_both(tmp_path: Path) -> None:
    # The rename is the look for the key's directory: a stored conversation is not replaced,
    # and the spare stays ready for the next new key.
    paths, spares = one_spare(tmp_path)
    key_dir = key_another_agent_uses(paths, "k")
    with pytest.raises(FileExistsError):
        spares.place(key_dir)
    assert [p.name for p in key_dir.iterdir()] == ["other+events.jsonl"]
    assert (key_dir / "other+events.jsonl").read_bytes() == OTHERS_EVENTS
    assert not spares.wanted()
    assert spares.place(paths.instance_dir(SWARM, "new")) is not None
    spares.close()
