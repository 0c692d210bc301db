"""The daemon's log file (`goondan.logs.LogFile`) and its children's pipe (`OutputPipe`), on
real files, a real FIFO that nobody reads (a disk that does not answer) and a real full tmpfs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from goondan.logs import QUEUE_BYTES, LogFile, OutputPipe
from tests.small_disk import fill, small_disk
from tests.waiting import wait_for


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def line(n: int, size: int = 0) -> bytes:
    return (json.dumps({"event": f"line {n}", "pad": "x" * size}) + "\n").encode()


def test_the_file_rotates_by_size_and_keeps_its_count(tmp_path):
    path = tmp_path / "logs" / "daemon.log"
    log = LogFile(path, max_bytes=300, files=3)
    for n in range(40):
        log.write(line(n, 40))
    log.close()
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["daemon.log", "daemon.log.1", "daemon.log.2"]
    for p in path.parent.iterdir():
        assert 0 < p.stat().st_size <= 300
    # the newest lines, in order, across the files that are kept
    kept = [r["event"] for name in names[::-1] for r in records(path.parent / name)]
    assert kept == [f"line {n}" for n in range(40 - len(kept), 40)]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"


def test_a_line_longer_than_the_limit_fills_a_file_alone(tmp_path):
    path = tmp_path / "daemon.log"
    log = LogFile(path, max_bytes=100, files=5)
    log.write(line(1))
    log.write(line(2, 500))
    log.write(line(3))
    log.close()
    assert [r["event"] for r in records(path.with_name("daemon.log.1"))] == ["line 2"]
    assert [r["event"] for r in records(path)] == ["line 3"]


def test_writing_never_waits_for_the_file(tmp_path):
    # A FIFO nobody reads: the writer thread blocks opening it, as on a disk that hangs.
    path = tmp_path / "daemon.log"
    os.mkfifo(path)
    log = LogFile(path, max_bytes=1 << 30, files=2)
    big = line(0, 1000)
    started = time.monotonic()
    for _ in range(2 * QUEUE_BYTES // len(big)):  # twice what the queue holds
        log.write(big)
    assert time.monotonic() - started < 2.0
    # Once the "disk" answers, the queued lines arrive, then a count of the dropped ones.
    copy = tmp_path / "copy"
    with open(copy, "wb") as out:
        reader = subprocess.Popen(["cat", str(path)], stdout=out)
    log.write(line(1))
    log.close(timeout_s=30)
    assert reader.wait(30) == 0  # the file was closed: all of it came
    out = copy.read_bytes().splitlines()
    got = [json.loads(x) for x in out]
    queued = [r for r in got if r["event"] == "line 0"]
    # what the queue holds, and the batch the writer took before the file blocked it
    assert len(queued) >= QUEUE_BYTES // len(big)
    dropped = next(r for r in got if r["event"] == "log lines dropped")
    assert dropped["count"] == 2 * QUEUE_BYTES // len(big) - len(queued) > 0
    assert got[-1]["event"] == "line 1"


def test_a_full_disk_drops_lines_without_failing_and_says_so_later():
    with small_disk() as disk:
        path = disk / "logs" / "daemon.log"
        log = LogFile(path, max_bytes=1 << 30, files=2)
        log.write(line(1))
        wait_for(lambda: path.exists() and path.stat().st_size > 0)
        filler = fill(disk)
        for n in range(2, 12):
            log.write(line(n, 3000))  # none fits
        wait_for(lambda: log._dropped == 10)  # the writer went through them
        assert path.read_bytes().endswith(b"\n")  # no torn line left
        filler.unlink()  # space returns
        log.write(line(12))
        log.close()
        assert records(path) == [
            {"event": "line 1", "pad": ""},
            {**records(path)[1], "event": "log lines dropped", "count": 10},
            {"event": "line 12", "pad": ""},
        ]


def test_children_output_reaches_the_file_as_json_records(tmp_path):
    path = tmp_path / "daemon.log"
    log = LogFile(path, max_bytes=1 << 20, files=2)
    pipe = OutputPipe(log)
    code = (
        "import sys, traceback\n"
        'print(\'{"event": "agent says", "level": "info"}\', file=sys.stderr, flush=True)\n'
        "try:\n    raise ValueError('the child crashed')\n"
        "except ValueError:\n    traceback.print_exc()\n"
        "print('no newline at the end', end='')\n"
    )
    subprocess.run([sys.executable, "-c", code], stdout=pipe.write_fd, stderr=pipe.write_fd)
    pipe.close()
    log.close()
    got = records(path)
    assert got[0] == {"event": "agent says", "level": "info"}
    # The rest is one record when the child prints it without a pause (a loaded machine may
    # cut it into several, never lose or reorder a line).
    assert all(r["event"] == "process output" and r["level"] == "warning" for r in got[1:])
    text = "\n".join(str(r["text"]) for r in got[1:])
    assert text.startswith("Traceback (most recent call last):\n  File ")
    assert text.endswith("ValueError: the child crashed\nno newline at the end")
