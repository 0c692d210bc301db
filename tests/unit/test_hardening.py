"""forbid_inspection clears the dumpable flag of a real process (the kernel then makes its
/proc/PID/environ and /proc/PID/mem root-only and refuses ptrace from same-uid processes)."""

from __future__ import annotations

import subprocess
import sys

READ_FLAG = """
import ctypes
from goondan.hardening import forbid_inspection
libc = ctypes.CDLL(None)
before = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
forbid_inspection()
print(before, libc.prctl(3, 0, 0, 0, 0))
"""


def test_forbid_inspection_clears_the_dumpable_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-c", READ_FLAG], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["1", "0"]
