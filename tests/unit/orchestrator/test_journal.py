import asyncio
import errno
import os
import threading

import pytest

from goondan.paths import StorageError
from ipc.error_codes import ErrorCode
from orchestrator.journal import Journal
from tests.held_disk import HeldDisk
from tests.waiting import until


async def test_unanswered_inputs_survive_a_restart(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    assert journal.recover() == []
    journal.accept("a-1", b"frame-1")
    journal.accept("a-2", b"\x00binary\xff")
    journal.done("a-1")
    journal.close()  # as if the process died here

    again = Journal(path)
    [entry] = again.recover()
    assert (entry.id, entry.frame) == ("a-2", b"\x00binary\xff")
    # recovery compacted the file to the open entries
    assert path.read_bytes().count(b"\n") == 1


async def test_a_torn_last_line_is_ignored(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.recover()
    journal.accept("x", b"1")
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"op":"accept","id":"y","fr')
    assert [e.id for e in Journal(path).recover()] == ["x"]


async def test_done_for_an_unknown_id_writes_nothing(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.recover()
    journal.done("never-accepted")
    journal.close()
    assert path.read_bytes() == b""


async def test_a_long_running_journal_stays_small_and_keeps_what_is_open(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, compact_bytes=4096)
    journal.recover()
    journal.accept("kept-1", b"first")
    for i in range(2000):  # answered inputs, as a busy connector makes them
        journal.accept(f"in-{i}", b"x" * 100)
        journal.done(f"in-{i}")
    journal.accept("kept-2", b"second")
    assert path.stat().st_size < 4096 + 1024
    journal.close()
    assert [(e.id, e.frame) for e in Journal(path).recover()] == [
        ("kept-1", b"first"),
        ("kept-2", b"second"),
    ]


def opened(path, fsynced, **options):
    """A journal as the daemon opens it at start-up, the fsyncs of its recovery forgotten."""
    journal = Journal(path, **options)
    journal.recover()
    fsynced.clear()
    return journal


async def test_an_input_unanswered_after_the_delay_is_fsynced_with_the_others(tmp_path, fsynced):
    path = tmp_path / "journal.jsonl"
    journal = opened(path, fsynced, sync_after_s=0.05)
    journal.accept("a", b"1")
    journal.accept("b", b"2")
    assert fsynced == []  # written to the OS only: routed without waiting for the disk
    await until(lambda: fsynced, what="the journal's fsync")
    assert fsynced == [str(path)]  # one fsync for both
    await asyncio.sleep(0.1)
    assert fsynced == [str(path)]
    journal.close()
    assert [e.id for e in Journal(path).recover()] == ["a", "b"]


async def test_an_input_answered_within_the_delay_needs_no_fsync(tmp_path, fsynced):
    journal = opened(tmp_path / "journal.jsonl", fsynced, sync_after_s=0.05)
    journal.accept("a", b"1")
    journal.done("a")
    await asyncio.sleep(0.1)
    journal.close()
    assert fsynced == []


async def test_close_fsyncs_the_inputs_still_waiting_for_it(tmp_path, fsynced):
    path = tmp_path / "journal.jsonl"
    journal = opened(path, fsynced, sync_after_s=60)
    journal.accept("a", b"1")
    journal.close()
    assert fsynced == [str(path)]


# -- inputs acknowledged once durable (a connector's events) ------------------------------------


async def test_inputs_accepted_together_share_one_fsync_off_the_event_loop(
    tmp_path, fsynced, monkeypatch
):
    path = tmp_path / "journal.jsonl"
    journal = opened(path, fsynced)
    disk = HeldDisk(monkeypatch)
    durable = [journal.accept_durably(f"e{i}", b"x") for i in range(5)]
    assert not disk.running.is_set()  # written to the OS; the fsync comes after, in a thread
    await until(disk.running.is_set, what="the fsync under way")  # the loop runs meanwhile
    assert not any(d.done() for d in durable)  # not durable yet: not acknowledged
    disk.release()
    await asyncio.gather(*durable)
    assert fsynced == [str(path)]  # one for the five
    assert threading.get_ident() not in disk.threads
    journal.close()
    assert [e.id for e in Journal(path).recover()] == [f"e{i}" for i in range(5)]


async def test_inputs_accepted_during_an_fsync_share_the_next(tmp_path, fsynced, monkeypatch):
    path = tmp_path / "journal.jsonl"
    journal = opened(path, fsynced)
    disk = HeldDisk(monkeypatch)
    first = journal.accept_durably("a", b"1")
    await until(disk.running.is_set, what="the first fsync under way")
    later = [journal.accept_durably(name, b"2") for name in ("b", "c", "d")]
    disk.release()
    await first
    await asyncio.gather(*later)
    assert fsynced == [str(path)] * 2  # the first began before their lines: one more
    journal.close()


async def test_a_compaction_during_an_fsync_keeps_every_open_input(tmp_path, fsynced, monkeypatch):
    path = tmp_path / "journal.jsonl"
    journal = opened(path, fsynced, compact_bytes=1024)
    disk = HeldDisk(monkeypatch, off_the_loop=True)
    durable = journal.accept_durably("kept", b"event")
    await until(disk.running.is_set, what="its fsync under way")
    for i in range(40):  # answered inputs: the file is compacted under the running fsync
        journal.accept(f"in-{i}", b"x" * 100)
        journal.done(f"in-{i}")
    assert path.stat().st_size < 1024
    disk.release()
    await durable  # the thread synced the file it began with, which the compaction replaced
    journal.close()
    assert [e.id for e in Journal(path).recover()] == ["kept"]


async def test_close_leaves_inputs_waiting_for_their_fsync_to_the_next_run(tmp_path, fsynced):
    path = tmp_path / "journal.jsonl"
    journal = opened(path, fsynced)
    durable = journal.accept_durably("a", b"1")
    journal.close()  # the daemon stops before the fsync's thread ran
    assert durable.cancelled()  # so the event is not routed nor acknowledged now
    assert fsynced == [str(path)]  # but its line is durable, for the next run to deliver
    assert [e.id for e in Journal(path).recover()] == ["a"]


async def test_without_fsync_an_input_is_durable_at_once(tmp_path, fsynced):
    journal = opened(tmp_path / "journal.jsonl", fsynced, fsync=False)
    assert journal.accept_durably("a", b"1").done()
    journal.close()
    assert fsynced == []


async def test_an_fsync_that_fails_fails_every_input_waiting_on_it(tmp_path, monkeypatch):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.recover()

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    durable = [journal.accept_durably(name, b"1") for name in ("a", "b")]
    for waiter in durable:
        with pytest.raises(StorageError) as failed:
            await waiter
        assert failed.value.code == ErrorCode.E_STORAGE and "Input/output error" in str(
            failed.value
        )
    monkeypatch.undo()
    journal.close()


async def test_an_input_whose_fsync_failed_is_refused_and_not_delivered_again(
    tmp_path, monkeypatch
):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.recover()

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    outcome: list[object] = []
    journal.when_durable(
        journal.accept_durably("a", b"1"), "a", lambda: outcome.append("routed"), outcome.append
    )
    await until(lambda: outcome, what="the input's outcome")
    [refused] = outcome
    assert isinstance(refused, StorageError) and refused.code == ErrorCode.E_STORAGE
    monkeypatch.undo()
    journal.close()
    assert Journal(path).recover() == []  # refused now: not delivered by the next run
