"""The bench's reading of other processes' CPU (`bench.procs.cpu_use`), on a real process."""

import subprocess
import sys

from bench.procs import CpuUse, cpu_us_per, cpu_use

BURN = """
import sys, time
print("ready", flush=True)
for line in sys.stdin:
    started = time.process_time()
    while time.process_time() - started < 0.003:  # 3 ms of CPU, under one clock tick
        pass
    print("done", flush=True)
"""

TOUCH = """
import mmap, sys
print("ready", flush=True)
for line in sys.stdin:
    pages = mmap.mmap(-1, 64 * 4096)  # fresh anonymous memory: its first write to each page faults
    for offset in range(0, 64 * 4096, 4096):
        pages[offset] = 1
    pages.close()
    print("done", flush=True)
"""


def read_around(script: str, times: int) -> tuple[CpuUse, CpuUse]:
    """`cpu_use` of a process running `script`, before and after it did its work `times`
    times (a line in, `done` out each)."""
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "ready\n"
        before = cpu_use([proc.pid])
        for _ in range(times):
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "done\n"
        after = cpu_use([proc.pid])
        proc.kill()
    return before, after


def test_a_few_milliseconds_of_cpu_are_read_that_clock_ticks_would_round_away():
    before, after = read_around(BURN, 2)
    used_ms = (after.run_ns - before.run_ns) / 1e6
    assert 6 <= used_ms < 100  # two bursts of 3 ms, and a little to read and answer
    per_burst = cpu_us_per(before, after, 2)
    assert per_burst["cpuUs"] == (after.run_ns - before.run_ns) / 1000 / 2
    # Woken for each line it read (and perhaps resumed after a preemption), then slept.
    assert per_burst["runs"] is not None and 1 <= per_burst["runs"] < 20
    user, kernel = per_burst["userUs"], per_burst["kernelUs"]
    if user is not None and kernel is not None:  # a tick moved: the split adds up
        assert abs(user + kernel - (after.run_ns - before.run_ns) / 1000 / 2) < 1e-6


def test_the_page_faults_a_process_takes_are_counted_per_thing_done():
    faults = cpu_us_per(*read_around(TOUCH, 3), 3)["faults"]
    assert faults is not None and 64 <= faults < 200  # 64 new pages each, and a few more


def test_a_process_that_is_gone_is_left_out():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert cpu_use([proc.pid]).run_ns == 0
