"""`goondan send` with an input over the 64 MiB message limit: the CLI refuses it before it is
sent (the daemon's socket would drop it unanswered) and says so in one line."""

from __future__ import annotations

from pathlib import Path

from ipc.zmtp import MAX_MESSAGE_BYTES, MAX_READ_BYTES
from tests.e2e.conftest import goondan


def test_send_over_the_message_limit_fails_at_once(start_daemon, state_root: Path) -> None:
    daemon = start_daemon()
    big = state_root / "big.txt"
    # Past what the daemon's socket reads at all (a little over the limit is read, and the
    # daemon answers it): such a message made the socket drop the connection, unanswered.
    big.write_bytes(b"x" * MAX_READ_BYTES)
    with open(big) as stdin:
        proc = goondan("send", "-", "--timeout", "20", "--state-root", str(state_root), stdin=stdin)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("goondan: MESSAGE_TOO_LARGE: "), proc.stderr
    assert f"{MAX_MESSAGE_BYTES:,}-byte limit" in lines[0]
    assert "Traceback" not in proc.stderr

    ok = daemon.send("hello")  # the daemon never saw it, and serves on
    assert ok.returncode == 0, ok.stderr


def test_send_reads_its_input_from_stdin(start_daemon, state_root: Path) -> None:
    start_daemon()
    proc = goondan("send", "-", "--state-root", str(state_root), input="hello from stdin")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
