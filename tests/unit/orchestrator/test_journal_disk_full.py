"""The journal on a full disk (a real 3 MB tmpfs filled with `dd`): a write that does not fit
raises `StorageError` and leaves no torn line; once space returns, nothing accepted is lost."""

from __future__ import annotations

import pytest

from goondan.paths import StorageError
from orchestrator.journal import Journal, _decoder
from tests.small_disk import fill, small_disk


def lines(path):
    return [line for line in path.read_bytes().split(b"\n") if line]


async def test_a_write_that_does_not_fit_raises_and_leaves_no_torn_line():
    with small_disk() as disk:
        path = disk / "journal.jsonl"
        journal = Journal(path)
        journal.recover()
        journal.accept("kept-1", b"x" * 100)
        filler = fill(disk)
        # The file's last page has room for part of a big entry: the write comes back short.
        with pytest.raises(StorageError) as caught:
            journal.accept("big", b"y" * 64 * 1024)
        assert caught.value.code == "E_STORAGE"
        assert str(path) in str(caught.value) and "journal" in str(caught.value)
        assert path.read_bytes().endswith(b"\n")
        assert [_decoder.decode(line).id for line in lines(path)] == ["kept-1"]

        filler.unlink()  # space returns
        journal.accept("kept-2", b"z")
        journal.close()  # as if the process died here
        assert [e.id for e in Journal(path).recover()] == ["kept-1", "kept-2"]


async def test_a_failed_done_leaves_the_entry_for_one_more_delivery():
    with small_disk() as disk:
        path = disk / "journal.jsonl"
        journal = Journal(path)
        journal.recover()
        journal.accept("a" * 3000, b"")  # the done line will not fit in the page left over
        filler = fill(disk)
        with pytest.raises(StorageError):
            journal.done("a" * 3000)
        filler.unlink()
        journal.close()
        assert [e.id for e in Journal(path).recover()] == ["a" * 3000]


async def test_recovery_skips_a_torn_line_and_reads_on(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.recover()
    journal.accept("before", b"1")
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"op":"accept","id":"torn","fr')  # a crash in the middle of a write
    journal = Journal(path)
    # An append after the torn tail (e.g. recovery could not rewrite the file) starts a line
    # of its own instead of joining the torn one.
    journal.accept("after", b"2")
    journal.close()
    assert [e.id for e in Journal(path).recover()] == ["before", "after"]


def test_a_torn_line_in_the_middle_does_not_hide_the_lines_after_it(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(
        b'{"op":"accept","id":"a","frame":"MQ=="}\n'
        b'{"op":"accept","id":"b","fra\n'
        b'{"op":"accept","id":"c","frame":"Mw=="}\n'
    )
    assert [e.id for e in Journal(path).recover()] == ["a", "c"]


async def test_the_requester_gets_its_answer_when_the_done_line_cannot_be_written():
    from orchestrator.router import Requester, Router
    from tests.unit.orchestrator.test_router import RecordingOutbox, delegate, reply_to

    with small_disk() as disk:
        journal = Journal(disk / "journal.jsonl")
        journal.recover()
        outbox = RecordingOutbox()
        outbox.running.add("a")
        router = Router({"a"}, "a", outbox, lambda name: None, lambda p, _: journal.done(p.oid))
        router.agent_ready("a")
        request_id = "r-" + "i" * 3000  # its done line needs a page of its own
        journal.accept(request_id, b"frame")
        router.delegate(Requester("control", b"cli", "c1"), delegate("a"), request_id)
        filler = fill(disk)
        [(_, forwarded)] = outbox.to_agents
        router.result(*reply_to(forwarded, "the answer"))
        assert [r.response for r in outbox.results()] == ["the answer"]
        filler.unlink()
        journal.close()
        assert [e.id for e in Journal(disk / "journal.jsonl").recover()] == [request_id]
