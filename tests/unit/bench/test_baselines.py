"""The bench's helpers at a figure's scale: a thousand agents' pipes open at once, and the
kernel threads whose CPU the scale figures report beside the arms'."""

import os
import resource
import subprocess
import sys
from pathlib import Path

from bench import baselines
from bench.procs import Procs, memory_monitors


def test_a_helpers_line_is_read_past_file_descriptor_1024() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # as 1,000 agents' pipes
    try:
        with Procs() as procs:
            proc = procs.spawn([sys.executable, "-c", "print('up')"], stdout=subprocess.PIPE)
            assert proc.stdout is not None and proc.stdout.fileno() > 1024
            assert baselines.read_line(proc, 30) == "up"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_kernels_memory_monitors_are_found_as_damon_lists_them() -> None:
    admin = Path("/sys/kernel/mm/damon/admin/kdamonds")
    listed = set()
    for kdamond in admin.glob("[0-9]*") if admin.is_dir() else ():
        if (kdamond / "state").read_text().strip() == "on":
            listed.add(int((kdamond / "pid").read_text()))
    assert set(memory_monitors()) == listed
