"""`FileTail`: what `goondan logs -f` and the studio see of a file that is appended and rotated."""

from __future__ import annotations

import os
from pathlib import Path

from goondan.file_tail import FileTail


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _rotate(path: Path) -> None:
    os.replace(path, path.with_name(path.name + ".1"))


def test_it_returns_whole_lines_and_keeps_a_half_written_one_for_later(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = FileTail(path)
    assert tail.read_new() == []  # no file yet
    _append(path, b"one\ntw")
    assert tail.read_new() == [b"one"]
    _append(path, b"o\nthree\n")
    assert tail.read_new() == [b"two", b"three"]
    assert tail.read_new() == []


def test_a_rotation_between_reads_gives_the_old_files_rest_then_the_new_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runtime-events.jsonl"
    tail = FileTail(path)
    _append(path, b"1\n")
    assert tail.read_new() == [b"1"]
    _append(path, b"2\n3\n")
    _rotate(path)
    _append(path, b"4\n")
    assert tail.read_new() == [b"2", b"3", b"4"]


def test_two_rotations_between_reads_lose_only_what_was_rotated_away(tmp_path: Path) -> None:
    path = tmp_path / "runtime-events.jsonl"
    tail = FileTail(path)
    _append(path, b"1\n")
    tail.read_new()
    _append(path, b"2\n")
    _rotate(path)
    _append(path, b"3\n")
    _rotate(path)  # the file holding "2" is gone now
    _append(path, b"4\n")
    assert tail.read_new() == [b"4"]


def test_history_takes_the_newest_bytes_from_the_rotated_file_too(tmp_path: Path) -> None:
    path = tmp_path / "runtime-events.jsonl"
    _append(path, b"old-1\nold-2\nold-3\n")
    _rotate(path)
    _append(path, b"new-1\n")
    # 13 bytes: "new-1\n" (6) and the rotated file's last 7, "\nold-3\n", whose first
    # (cut) line is dropped.
    assert FileTail(path, history_bytes=13).read_new() == [b"old-3", b"new-1"]
    assert FileTail(path, history_bytes=4).read_new() == []  # "-1\n" is a cut line
    assert FileTail(path).read_new() == [b"new-1"]  # no history: the live file from the top
