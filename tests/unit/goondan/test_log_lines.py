"""The daemon's processes log to one stderr: each log line reaches it whole, in one write,
even with unbuffered output (PYTHONUNBUFFERED, as many containers set), where `print()` would
write the line and its newline apart and let another process's line in between."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

LINES = 2000

# A process logging as the daemon's do: `configure_logging`, then many lines at once.
LOGGER = """
import sys
from goondan.logs import configure_logging, LogFile
import structlog
from pathlib import Path
if sys.argv[2] == "tee":
    log_file = LogFile(Path(sys.argv[3]) / "daemon.log", max_bytes=10**8, files=2)
    configure_logging("info", json=True, log_file=log_file)
else:
    configure_logging("info", json=True)
log = structlog.get_logger().bind(writer=sys.argv[1])
for n in range(int(sys.argv[4])):
    log.info("a line", n=n, pad="x" * 100)
"""


@pytest.mark.parametrize("destination", ["stderr", "tee"])
def test_lines_from_processes_sharing_stderr_stay_whole(tmp_path, destination) -> None:
    read, write = os.pipe()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", LOGGER, name, destination, str(tmp_path / name), str(LINES)],
            stderr=write,
            env=env,
        )
        for name in ("a", "b")
    ]
    os.close(write)
    with os.fdopen(read, "rb") as shared:
        output = shared.read().decode()
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    records = [json.loads(line) for line in output.splitlines()]
    for name in ("a", "b"):
        assert [r["n"] for r in records if r["writer"] == name] == list(range(LINES))
