"""Processes the bench starts: a registry that kills every one of them, and /proc readers."""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from agentproc.spare_files import SpareFiles
from goondan.files import file_system_type
from goondan.paths import StatePaths

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def bench_env(**extra: str) -> dict[str, str]:
    """The environment for helper processes: `bench` importable, no inherited log level."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("GOONDAN_LOG_LEVEL", None)
    env.update(extra)
    return env


@contextlib.contextmanager
def short_tmpdir(under: Path | None = None) -> Iterator[Path]:
    """A temp dir with a short path (unix socket paths are limited to 107 bytes), in `under`
    or the system's temp dir.

    Removed when the bench exits, not when the figure ends: on ext4 the inode allocator skips
    (at a cost per inode) every inode freed in the last minute or more, so a figure's
    thousands of deleted files would slow the conversations the next figure creates."""
    path = Path(tempfile.mkdtemp(prefix="gb-", dir=under))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    yield path


def file_create_us(count: int = 300) -> float:
    """CPU time (user + system) to create one directory or empty file where the figures keep
    their state: the inode allocator of ext4 without a journal skips every inode freed in the
    last minutes at a cost each, so after many deletions (a test run, the last bench's exit)
    creating a conversation costs ten times its usual, and the figures that create
    conversations are slower for it. Made by the agents' own `SpareFiles`, where an agent of
    a figure's daemon makes its spares (a state root in `<tmp>/p/s`, as `bench.product` puts
    it), hundreds of them, as a figure makes (docs/performance.md). Reported beside the
    machine, so such a run is recognised."""
    with short_tmpdir() as tmp:
        swarm = StatePaths.at(tmp / "p" / "s").swarm("default")
        home, events = swarm.spares / "probe", "probe+events.jsonl"
        spares = SpareFiles(home, swarm.instances, events, count=count // 2)
        started = time.process_time()
        spares.refill()  # each spare a new conversation's directory and its events file
        used = time.process_time() - started
        made_all = not spares.wanted()
        spares.close()
        if not made_all:  # `refill` stops quietly on an error, as an agent must go on
            raise OSError(f"the disk probe could not make its files in {home}")
        return used / count * 1e6


def memory_filesystem() -> Path | None:
    """A tmpfs to keep state in (/dev/shm), for the diagnostic that leaves the disk out: None
    where there is none."""
    shm = Path("/dev/shm")
    found = file_system_type(shm) == "tmpfs"
    return shm if found and os.access(shm, os.W_OK) else None


# A spare in a batch placed apart costs ~35 us here quiet, ~45 right after 20,000 deletions;
# beside such a deletion 300-1,000 (docs/performance.md, "New conversations and ext4").
QUIET_FILE_CREATE_US = 60.0


def wait_for_quiet_disk(max_wait_s: float = 150.0, every_s: float = 15.0) -> tuple[float, float]:
    """Wait (at most `max_wait_s`) until creating a file costs its usual again, as it does
    some minutes after a run (a test run, the bench's last exit) deleted thousands of files.
    (the cost at the end, seconds waited)"""
    waited = 0.0
    cost = file_create_us()
    while cost > QUIET_FILE_CREATE_US and waited < max_wait_s:
        time.sleep(every_s)
        waited += every_s
        cost = file_create_us()
    return cost, waited


class Procs:
    """Every process a figure starts, each in its own session; `close()` SIGKILLs the groups.

    Use as a context manager so a failing figure still leaves nothing behind.
    """

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[Any]] = []

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spawn(self, args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("env", bench_env())
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("cwd", str(REPO))
        proc: subprocess.Popen[Any] = subprocess.Popen(args, **kwargs)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            kill_group(proc)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        self.procs.clear()


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process and its session (its children), if still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def pss_kb(pid: int) -> int | None:
    """Proportional set size of one process, from /proc/PID/smaps_rollup."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def memory_of(pids: list[int]) -> dict[str, Any]:
    """The processes' PSS and RSS, summed and per process (those gone are left out)."""
    pss = [p for p in (pss_kb(pid) for pid in pids) if p is not None]
    rss = [r for r in (rss_kb(pid) for pid in pids) if r]
    return {
        "processes": len(pids),
        "measured": len(pss),
        "pssKiBTotal": sum(pss),
        "pssMiBSum": sum(pss) / 1024,
        "rssMiBSum": sum(rss) / 1024,
        "pssMiBPerProcess": sum(pss) / len(pss) / 1024 if pss else float("nan"),
        "rssMiBPerProcess": sum(rss) / max(1, len(rss)) / 1024,
    }


class CpuUse(NamedTuple):
    """What processes have used of the CPU so far (`cpu_use`)."""

    run_ns: int  # exact: every live thread's time on a CPU (/proc/PID/task/TID/schedstat)
    user_ticks: int  # /proc/PID/stat, in clock ticks (10 ms): only to split `run_ns`
    system_ticks: int
    # How many times a thread was put on a CPU (schedstat's third field): a wake-up each, or
    # a resume after being preempted. A turn is one; a timer, an fsync's wait, a thread's
    # hand-off are more, each in a cold process at scale.
    runs: int = 0
    # Page faults (/proc/PID/stat's minflt): at scale most are an agent's first write to a
    # page it shares with its template, which the kernel then copies.
    faults: int = 0


def cpu_use(pids: list[int]) -> CpuUse:
    """The processes' CPU use so far (those gone, and threads that ended, are left out).

    /proc/PID/stat counts in clock ticks: an agent that uses 4 ms of CPU in a figure moves its
    count by 0 or 1 tick, and 1,000 freshly forked agents, all just past a tick, can sum to
    nothing. The scheduler's run time is in nanoseconds."""
    run_ns = user = system = runs = faults = 0
    for pid in pids:
        fields = _stat_fields(Path(f"/proc/{pid}"))
        if not fields:
            continue
        faults += int(fields[7])
        user += int(fields[11])
        system += int(fields[12])
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, ValueError):
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        on_cpu, _, slices = f.read().split()
                    run_ns += int(on_cpu)
                    runs += int(slices)
    return CpuUse(run_ns, user, system, runs, faults)


def cpu_us_per(before: CpuUse, after: CpuUse, count: int) -> dict[str, float | None]:
    """µs of CPU per `count` things done between two readings: `cpuUs`, the exact run time,
    and `userUs` + `kernelUs`, split as the clock ticks split it (None when no tick moved);
    `runs`, the times a thread was put on a CPU; `faults`, page faults."""
    total_us = (after.run_ns - before.run_ns) / 1000 / max(count, 1)
    runs = (after.runs - before.runs) / max(count, 1)
    faults = (after.faults - before.faults) / max(count, 1)
    user_ticks = after.user_ticks - before.user_ticks
    ticks = user_ticks + after.system_ticks - before.system_ticks
    user_us = total_us * user_ticks / ticks if ticks > 0 else None
    kernel_us = None if user_us is None else total_us - user_us
    return {
        "cpuUs": total_us,
        "userUs": user_us,
        "kernelUs": kernel_us,
        "runs": runs,
        "faults": faults,
    }


def cpu_text(cpu: dict[str, float | None]) -> str:
    """`cpu_us_per`'s reading as the notes print it."""
    user, kernel = cpu["userUs"], cpu["kernelUs"]
    split = "" if user is None or kernel is None else f" ({user:.0f} user + {kernel:.0f} kernel)"
    faults = cpu.get("faults")
    faulted = "" if faults is None else f", {faults:.1f} page faults"
    return f"{cpu['cpuUs']:.0f} us{split}, on a CPU {cpu['runs']:.2f} times{faulted}"


def memory_monitors() -> list[int]:
    """The kernel's DAMON threads (`kdamond.N`), which some hosts run to find cold memory:
    every sampling interval each checks whether pages were accessed, walking every mapping of
    each page it samples, so its CPU grows with the processes that share pages (agents forked
    from one template). Their CPU is the machine's, not the figure's arms', and shows in their
    waves."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().startswith("kdamond"):
                    pids.append(int(entry.name))
    return pids


def _stat_fields(proc_dir: Path) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first); [] if it is gone."""
    try:
        return (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def descendants(root_pid: int) -> list[int]:
    """Every live process below `root_pid` (children, grandchildren...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found.append(child)
            todo.append(child)
    return found


def pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def wait_pidfd(fd: int, timeout_s: float) -> float | None:
    """Block until the process behind `fd` is gone; returns time.monotonic() then, or None."""
    ready, _, _ = select.select([fd], [], [], timeout_s)
    return time.monotonic() if ready else None
