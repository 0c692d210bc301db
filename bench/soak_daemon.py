"""The soak's daemon, from outside: `goondan run` / `goondan stop` as a user runs them, `status`
over the control socket as the CLI speaks it, SIGKILL, /proc for memory, and the journal file.

Nothing here depends on the daemon's internals: the journal is read as JSON lines whose string
fields may hold the accepted frame (base64 msgpack), and a request id is found by its text.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.procs import PYTHON, REPO, bench_env

REQUEST_ID = re.compile(rb"req ([a-z0-9-]+)")
DAEMON_NOFILE = 1024  # the soft descriptor limit a systemd service gets by default


class StartFailed(RuntimeError):
    pass


class Generation:
    """Which incarnation of the daemon is up: clients reconnect when it changes."""

    def __init__(self) -> None:
        self.value = 0
        self._up = threading.Event()

    def went_down(self) -> None:
        self._up.clear()
        self.value += 1

    def came_up(self) -> None:
        self._up.set()

    def wait_up(self, timeout_s: float) -> bool:
        return self._up.wait(timeout_s)


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DAEMON_NOFILE, DAEMON_NOFILE))


class SoakDaemon:
    def __init__(self, bundle: Path, state_root: Path, log_path: Path) -> None:
        self.bundle = bundle
        self.state_root = state_root
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.generation = Generation()
        self.starts = 0
        # request id -> the journal's id for it, for each input any journal snapshot held
        self.journal_ids: dict[str, str] = {}

    @property
    def journal_file(self) -> Path:
        return self.state_root / "run" / "journal.jsonl"

    def _cli(self, *args: str) -> list[str]:
        return [PYTHON, "-m", "goondan.cli.main", *args, "--state-root", str(self.state_root)]

    def start(self, timeout_s: float = 60.0) -> None:
        """`goondan run` on the state root; returns once `status` answers. A new run replays
        what the journal holds."""
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while time.monotonic() < deadline:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [*self._cli("run", str(self.bundle)), "--log-level", "info"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    cwd=str(REPO),
                    env=bench_env(),
                    start_new_session=True,
                    preexec_fn=_limit_descriptors,
                )
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.status(timeout_s=2.0)
                except Exception as exc:  # not up yet
                    last_error = str(exc)
                    time.sleep(0.05)
                    continue
                self.starts += 1
                self.generation.came_up()
                return
            if self.proc.poll() is None:  # up, but never answering: not ours to leave
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                last_error = f"no answer to `status`: {self.log_tail()}"
                break
            last_error = f"exited {self.proc.returncode}: {self.log_tail()}"
            time.sleep(0.2)  # e.g. the state root's lock is still held
        raise StartFailed(f"goondan run did not come up in {timeout_s:g}s: {last_error}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        from goondan.cli.client import ControlClient
        from goondan.paths import StatePaths

        with ControlClient(StatePaths.at(self.state_root)) as client:
            reply = client.command("status", timeout_s=timeout_s)
        if not reply.ok:
            raise RuntimeError(f"status failed: {reply.error}")
        result: dict[str, Any] = reply.result
        return result

    def agent_pids(self) -> dict[str, int]:
        try:
            rows = self.status().get("processes", [])
        except Exception:
            return {}
        return {row["name"]: row["pid"] for row in rows if row.get("pid")}

    def kill(self) -> list[int]:
        """SIGKILL the orchestrator alone (its children must die with it), snapshot the
        journal it left. Returns agent pids still alive 2 s later (orphans), SIGKILLed."""
        agents = list(self.agent_pids().values())
        self.generation.went_down()
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return self.after_death(agents)

    def after_death(self, agents: list[int]) -> list[int]:
        """What to do once the orchestrator is gone, killed or not: read its journal, and
        reap agents that outlived it (a promise broken: they die with it)."""
        self.snapshot_journal()
        deadline = time.monotonic() + 2.0
        orphans = agents
        while orphans and time.monotonic() < deadline:
            time.sleep(0.05)
            orphans = [pid for pid in orphans if _alive(pid)]
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return orphans

    def stop(self, timeout_s: float = 30.0) -> bool:
        """`goondan stop`; True when the daemon exited by itself in time."""
        if not self.alive():
            return True
        self.generation.went_down()
        subprocess.run(
            self._cli("stop"),
            cwd=str(REPO),
            env=bench_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout_s + 10,
            check=False,
        )
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout_s)
            clean = True
        except subprocess.TimeoutExpired:
            clean = False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.snapshot_journal()
        return clean

    # -- the journal ---------------------------------------------------------------------------

    def snapshot_journal(self) -> set[str]:
        """Request ids of the accepted inputs the journal holds now, noted in `journal_ids`;
        returns the ones still open (accepted, not marked done)."""
        accepted: dict[str, str] = {}  # journal id -> request id
        done: set[str] = set()
        try:
            data = self.journal_file.read_bytes()
        except OSError:
            return set()
        for line in data.split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # torn, or not ours to read
            if not isinstance(entry, dict):
                continue
            key = str(entry.get("id", ""))
            if entry.get("op") == "done":
                done.add(key)
                continue
            for value in entry.values():
                found = _request_id_in(value)
                if found is not None:
                    accepted[key] = found
        self.journal_ids.update({rid: key for key, rid in accepted.items()})
        return {rid for key, rid in accepted.items() if key not in done}

    def journal_correlation_ids(self) -> list[str]:
        """The router's ids the journal shows (`<boot>-<n>`): what a forger would read."""
        try:
            data = self.journal_file.read_bytes()
        except OSError:
            return []
        ids = []
        for line in data.split(b"\n")[-200:]:
            with contextlib.suppress(ValueError, AttributeError):
                ids.append(str(json.loads(line)["id"]))
        return ids

    # -- memory and logs -----------------------------------------------------------------------

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _request_id_in(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    found = REQUEST_ID.search(value.encode())
    if found is None:
        with contextlib.suppress(binascii.Error, ValueError):
            found = REQUEST_ID.search(base64.b64decode(value, validate=True))
    return found.group(1).decode() if found else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        # A zombie is dead for our purposes.
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    return False


def disk_used_kib(path: Path) -> int:
    """KiB in use on the file system holding `path`."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return 0
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize // 1024


def largest_files(root: Path, count: int = 5) -> list[str]:
    """The `count` biggest files under `root`, as "<KiB> <path relative to root>"."""
    sizes = []
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                sizes.append((path.stat().st_size, path))
    sizes.sort(reverse=True)
    return [f"{size // 1024} KiB {path.relative_to(root)}" for size, path in sizes[:count]]


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """`field` of /proc/<pid>/status in KiB; 0 when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0
