"""The baselines' helpers at a figure's scale: a thousand agents' pipes are open at once."""

import os
import resource
import subprocess
import sys

from bench import baselines
from bench.procs import Procs


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
