"""`record_last_error`: a process's last error-level log line, kept in a file for `status`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """\
import sys
from pathlib import Path

import structlog

from goondan.connectors import SecretRedactor, install_redaction
from goondan.logs import configure_logging, record_last_error

path = Path(sys.argv[1])
configure_logging()
redactor = SecretRedactor()
install_redaction(redactor)
redactor.update(["hunter2"])
record_last_error(path)
log = structlog.get_logger()
log.info("starting")
log.warning("slow")
print("after info:", path.exists(), file=sys.stderr)
log.error("turn failed", error="a traceback\\n  token hunter2 refused " + "x" * 400)
print("first:", path.read_text(), file=sys.stderr)
try:
    raise ValueError("the disk is full")
except ValueError:
    log.exception("agent process failed")
"""


def test_only_error_lines_are_kept_redacted_summarised_and_cut(tmp_path: Path) -> None:
    path = tmp_path / "solo"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "after info: False" in proc.stderr  # nothing written for info and warning lines
    first = next(line for line in proc.stderr.splitlines() if line.startswith("first: "))
    assert first.startswith("first: turn failed: token ") and first.endswith("xxx")
    assert len(first) == len("first: ") + 300 and "hunter2" not in first  # redacted first
    # The traceback's last line says what went wrong; the file holds only the newest line.
    assert path.read_text() == "agent process failed: ValueError: the disk is full"
    assert path.stat().st_mode & 0o777 == 0o600
