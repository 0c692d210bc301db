"""The life of agent processes: spawn on demand, watch, respawn with backoff, stop.

Each process is watched by awaiting its exit (the kernel tells us at once, no polling). Crashes
1-5 in a row respawn at once; after that the agent is in `crashLoopBackOff` for
`min(1 s x 2^(n-6), 5 min)`. An answered request or a clean exit resets that count. Crashes
before `ready` are counted apart (a `ready` resets them): twice in a row is a start-up crash
loop, and the requests waiting for the agent fail instead of waiting for a fix.

Each launch gets a fresh secret credential (`Slot.credential`, until the process exits): it is
how agents.sock tells the slot's current process from anyone else (`orchestrator.trust`).

The supervisor owns its tasks (one per launch, watching that process until it exits, and the
hang watchdog): `stop_all` cancels what is left of them and waits until they have ended.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec
import structlog

from goondan.settings import DEFAULTS, DaemonSettings
from ipc import wire
from ipc.credential import new_credential
from ipc.tasks import TaskSet
from orchestrator.launcher import ChildProcess, Launcher

Status = Literal[
    "notStarted",
    "spawning",
    "idle",
    "processing",
    "draining",
    "terminated",
    "crashed",
    "crashLoopBackOff",
]


def crash_backoff(consecutive_crashes: int, settings: DaemonSettings) -> float:
    """Seconds to wait before respawning after the n-th crash in a row (0 = at once)."""
    if consecutive_crashes <= settings.crash_threshold:
        return 0.0
    exponent = consecutive_crashes - settings.crash_threshold - 1
    return min(settings.crash_backoff_initial_s * 2.0**exponent, settings.crash_backoff_max_s)


ProcessKind = Literal["agent", "connector"]


class Exit(msgspec.Struct, frozen=True):
    """How an agent's process ended, for the router to redeliver or fail its requests."""

    agent: str
    kind: ProcessKind
    code: int | None
    crashed: bool
    was_ready: bool  # False: it died during start-up
    consecutive_crashes: int
    startup_crashes: int  # crashes before `ready`, in a row
    start_error: str | None = None  # the agent reported why it cannot start


# Starts a connector process's name (and ZeroMQ identity), which `status` shows without it.
CONNECTION_PREFIX = "connection:"


class Slot:
    """One agent's (or connector's) process, over its successive incarnations."""

    def __init__(self, name: str, kind: ProcessKind) -> None:
        self.name = name
        self.kind: ProcessKind = kind  # which launcher starts it, what it may send
        self.status: Status = "notStarted"  # until it runs; again when it could not start
        self.last_exit: wire.LastExit | None = None  # why it last stopped, for `status`
        self.process: ChildProcess | None = None
        self.restarts = 0
        self.consecutive_crashes = 0  # for the back-off
        self.startup_crashes = 0  # in a row before `ready`
        self.ready = False
        self.hung = False  # the watchdog killed it; its exit is on the way
        self.credential: bytes | None = None  # of the launch under way, until its exit
        self.stopping = False
        self.start_error: str | None = None
        self.last_seen = 0.0
        self.respawn_timer: asyncio.TimerHandle | None = None
        self.exited = asyncio.Event()
        self.exited.set()


class Supervisor:
    def __init__(
        self,
        agents: list[str],
        launchers: dict[ProcessKind, Launcher],
        *,
        connectors: list[str] | None = None,
        on_ready: Callable[[str], None],
        on_exit: Callable[[Exit], None],
        settings: DaemonSettings = DEFAULTS.daemon,
        last_errors: Path | None = None,
    ) -> None:
        """`on_exit(exit)` lets the router redeliver or fail the agent's requests. `settings`:
        the hang timeout and the crash back-off. `last_errors`: the directory where each
        process keeps its last error-level log line (the children share the daemon's stderr,
        so this is what says why one died)."""
        self.slots = {name: Slot(name, "agent") for name in agents}
        for name in connectors or ():
            self.add(name, "connector")
        self.settings = settings
        self.hang_timeout_s = settings.hang_timeout_s
        self._tasks = TaskSet("supervisor")
        self._launchers = launchers
        self._on_ready = on_ready
        self._on_exit = on_exit
        self._closing = False
        self._last_errors = last_errors
        self._log = structlog.get_logger().bind(component="supervisor")

    def start_watchdog(self) -> None:
        self._tasks.spawn(self._watch_heartbeats(), name="heartbeat watchdog")

    async def _watch_heartbeats(self) -> None:
        """Exits are noticed at once; this catches the process that is alive but hung."""
        interval = min(1.0, self.hang_timeout_s / 3)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for slot in self.slots.values():
                silent = now - slot.last_seen
                hang = slot.ready and not slot.hung and silent > self.hang_timeout_s
                if hang and slot.process is not None:
                    self._log.warning(
                        "agent hung (no heartbeat); killing it",
                        agent=slot.name,
                        pid=slot.process.pid,
                        silentSeconds=round(silent, 1),
                    )
                    # Still `ready` (it hung while running): its exit is a crash while
                    # handling requests, which are delivered again, not a start-up crash.
                    slot.hung = True
                    slot.process.kill()

    def ensure_running(self, name: str) -> None:
        slot = self.slots[name]
        # `exited` is clear from the moment a start is decided until that process is gone:
        # a second caller while the launch is still under way must not start another one.
        if self._closing or not slot.exited.is_set() or slot.respawn_timer is not None:
            return
        slot.status = "spawning"
        slot.exited.clear()
        slot.credential = new_credential()  # this launch's, until its process exits
        self._tasks.spawn(self._run(slot), name=f"run {slot.name}")

    def mark_ready(self, name: str, pid: int) -> None:
        slot = self.slots[name]
        slot.ready = True
        slot.startup_crashes = 0
        slot.status = "idle"
        slot.start_error = None
        slot.last_seen = time.monotonic()
        self._log.info("agent ready", agent=name, pid=pid, restarts=slot.restarts)
        self._on_ready(name)

    def mark_start_error(self, name: str, message: str) -> None:
        self.slots[name].start_error = message

    def touch(self, name: str) -> None:
        self.slots[name].last_seen = time.monotonic()

    def set_busy(self, name: str, busy: bool) -> None:
        slot = self.slots[name]
        if slot.ready and not slot.stopping:
            slot.status = "processing" if busy else "idle"

    def table(self) -> list[wire.ProcessInfo]:
        return [
            wire.ProcessInfo(
                s.name.removeprefix(CONNECTION_PREFIX) if s.kind == "connector" else s.name,
                s.kind,
                s.process.pid if s.process else None,
                s.status,
                s.restarts,
                s.last_exit,
                node=getattr(s.process, "node", None),  # where a Ray-placed process runs
            )
            for s in self.slots.values()
        ]

    def is_ready(self, name: str) -> bool:
        slot = self.slots[name]
        return slot.ready and not slot.hung

    async def _run(self, slot: Slot) -> None:
        assert slot.credential is not None
        self._take_last_error(slot)  # a former incarnation's, not this one's
        try:
            slot.process = await self._launchers[slot.kind].launch(slot.name, slot.credential)
        except Exception as exc:  # an OSError, or a bug: either way the slot must not hang
            self._log.error(
                "cannot start agent process",
                agent=slot.name,
                error=str(exc),
                exc_info=not isinstance(exc, OSError),
            )
            slot.credential = None
            slot.status = "crashed"
            slot.exited.set()
            error = f"cannot start the agent process: {exc}"
            slot.last_exit = wire.LastExit(time.time(), error=error)
            self._on_exit(
                Exit(
                    slot.name,
                    slot.kind,
                    None,
                    False,
                    False,
                    slot.consecutive_crashes,
                    slot.startup_crashes,
                    error,
                )
            )
            return
        self._log.debug("agent process started", agent=slot.name, pid=slot.process.pid)
        if slot.stopping:
            slot.process.terminate()  # a stop came while it was being launched
        code = await slot.process.wait()
        self._exited(slot, code)

    def _exited(self, slot: Slot, code: int) -> None:
        was_ready = slot.ready
        clean = code == 0 or slot.stopping
        logged = self._take_last_error(slot)  # what a crash logged last, if it logged anything
        slot.last_exit = _last_exit(code, slot.start_error, slot.hung, None if clean else logged)
        slot.process = None
        slot.credential = None  # its connection can no longer be admitted
        slot.ready = False
        slot.hung = False
        start_error, slot.start_error = slot.start_error, None
        if clean or start_error is not None:
            slot.status = "terminated" if start_error is None else "notStarted"
            slot.consecutive_crashes = slot.startup_crashes = 0
            self._log.info("agent process exited", agent=slot.name, code=code)
        else:
            slot.consecutive_crashes += 1
            if not was_ready:
                slot.startup_crashes += 1
            delay = crash_backoff(slot.consecutive_crashes, self.settings)
            slot.status = "crashLoopBackOff" if delay else "crashed"
            self._log.warning(
                "agent process crashed",
                agent=slot.name,
                code=code,
                signal=signal.Signals(-code).name if code < 0 else None,
                consecutiveCrashes=slot.consecutive_crashes,
                backoffSeconds=delay,
            )
        slot.exited.set()
        slot.stopping = False
        crashed = not clean and start_error is None
        self._on_exit(
            Exit(
                slot.name,
                slot.kind,
                code,
                crashed,
                was_ready,
                slot.consecutive_crashes,
                slot.startup_crashes,
                start_error,
            )
        )

    def _take_last_error(self, slot: Slot) -> str | None:
        """Read and remove the last error line the slot's process logged (exits are rare)."""
        if self._last_errors is None:
            return None
        path = self._last_errors / slot.name
        try:
            text = path.read_text(errors="replace")
            path.unlink()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._log.warning("cannot read the last error", agent=slot.name, error=str(exc))
            return None
        return text or None

    def respawn(self, name: str) -> None:
        """Start again after a crash, at once or after the crash-loop back-off."""
        slot = self.slots[name]
        delay = crash_backoff(slot.consecutive_crashes, self.settings)
        if delay == 0:
            slot.restarts += 1
            self.ensure_running(name)
            return
        if slot.respawn_timer is None:

            def fire() -> None:
                slot.respawn_timer = None
                slot.restarts += 1
                self.ensure_running(name)

            slot.respawn_timer = asyncio.get_running_loop().call_later(delay, fire)

    def note_success(self, name: str) -> None:
        self.slots[name].consecutive_crashes = 0

    def add(self, name: str, kind: ProcessKind) -> None:
        if name not in self.slots:
            self.slots[name] = Slot(name, kind)

    def remove(self, name: str) -> None:
        """Forget an agent that left the swarm (stop it first)."""
        slot = self.slots.pop(name, None)
        if slot is not None and slot.respawn_timer is not None:
            slot.respawn_timer.cancel()

    async def stop_all(self, send_shutdown: Callable[[str], bool], grace_s: float) -> None:
        """Drain every agent for good: no respawns after this. Returns once every task of
        the supervisor has ended."""
        self._closing = True
        try:
            await asyncio.gather(*(self.stop(n, send_shutdown, grace_s) for n in list(self.slots)))
        finally:
            await self._tasks.close()  # the watchdog, and launches that outlived their stop

    async def stop(self, name: str, send_shutdown: Callable[[str], bool], grace_s: float) -> None:
        """Drain one agent: `shutdown` -> it finishes its turns -> exit; SIGKILL after the
        grace period. A clean stop resets its crash count."""
        slot = self.slots[name]
        if slot.respawn_timer is not None:
            slot.respawn_timer.cancel()
            slot.respawn_timer = None
        if slot.exited.is_set():
            return  # nothing runs
        slot.stopping = True
        slot.status = "draining"
        process = slot.process
        if process is None:
            pass  # still being launched: `_run` terminates it the moment it exists
        elif not (slot.ready and send_shutdown(name)):
            process.terminate()  # not ready yet: it has nothing to drain
        try:
            async with asyncio.timeout(grace_s):
                await slot.exited.wait()
        except TimeoutError:
            self._log.warning("agent did not stop in time; killing it", agent=name)
            if slot.process is not None:
                slot.process.kill()
            await slot.exited.wait()


def _last_exit(
    code: int, start_error: str | None, hung: bool, logged: str | None = None
) -> wire.LastExit:
    error = start_error
    if error is None and hung:
        error = "hung: no heartbeat, killed by the watchdog"
    if error is None:
        error = logged
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return wire.LastExit(time.time(), signal=name, error=_last_line(error))
    return wire.LastExit(time.time(), code=code, error=_last_line(error))


def _last_line(error: str | None) -> str | None:
    """The last non-empty line of an error (a traceback's says what went wrong)."""
    if not error:
        return None
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else None
