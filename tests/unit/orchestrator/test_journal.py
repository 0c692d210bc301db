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
