import asyncio

from orchestrator.journal import Journal
from tests.waiting import until


def test_unanswered_inputs_survive_a_restart(tmp_path):
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


def test_a_torn_last_line_is_ignored(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.recover()
    journal.accept("x", b"1")
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"op":"accept","id":"y","fr')
    assert [e.id for e in Journal(path).recover()] == ["x"]


def test_done_for_an_unknown_id_writes_nothing(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.recover()
    journal.done("never-accepted")
    journal.close()
    assert path.read_bytes() == b""


def test_a_long_running_journal_stays_small_and_keeps_what_is_open(tmp_path):
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
    journal.accept("a", b"1", sync_now=False)
    journal.accept("b", b"2", sync_now=False)
    assert fsynced == []  # written to the OS only: routed without waiting for the disk
    await until(lambda: fsynced, what="the journal's fsync")
    assert fsynced == [str(path)]  # one fsync for both
    await asyncio.sleep(0.1)
    assert fsynced == [str(path)]
    journal.close()
    assert [e.id for e in Journal(path).recover()] == ["a", "b"]


async def test_an_input_answered_within_the_delay_needs_no_fsync(tmp_path, fsynced):
    journal = opened(tmp_path / "journal.jsonl", fsynced, sync_after_s=0.05)
    journal.accept("a", b"1", sync_now=False)
    journal.done("a")
    await asyncio.sleep(0.1)
    journal.close()
    assert fsynced == []


async def test_close_fsyncs_the_inputs_still_waiting_for_it(tmp_path, fsynced):
    path = tmp_path / "journal.jsonl"
    journal = opened(path, fsynced, sync_after_s=60)
    journal.accept("a", b"1", sync_now=False)
    journal.close()
    assert fsynced == [str(path)]


def test_an_input_accepted_to_be_synced_now_is_fsynced_before_accept_returns(tmp_path, fsynced):
    path = tmp_path / "journal.jsonl"
    journal = opened(path, fsynced)
    journal.accept("a", b"1")
    assert fsynced == [str(path)]
    journal.close()
    assert fsynced == [str(path)]  # nothing left to sync at close
