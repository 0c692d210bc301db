from orchestrator.journal import Journal


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
