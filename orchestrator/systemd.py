"""systemd integration: `sd_notify` over NOTIFY_SOCKET (READY, RELOADING, STOPPING, WATCHDOG).

Without NOTIFY_SOCKET (not under systemd) every call is a no-op.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

from ipc.tasks import TaskSet


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        # An address starting with "@" is in the abstract namespace.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        watchdog_pid = env.get("WATCHDOG_PID")
        usec = env.get("WATCHDOG_USEC", "")
        ours = watchdog_pid is None or watchdog_pid == str(os.getpid())
        self.watchdog_interval_s = int(usec) / 2_000_000 if usec.isdigit() and ours else None
        self._tasks = TaskSet("systemd notifier")  # the watchdog's pings

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, *fields: str) -> None:
        if not self._address:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            try:
                sock.sendto("\n".join(fields).encode(), self._address)
            except OSError:
                pass  # systemd went away; nothing useful to do about it

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def reloading(self) -> None:
        self.notify(
            "RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}"
        )

    def stopping(self) -> None:
        self.notify("STOPPING=1")

    def start_watchdog(self) -> None:
        """Ping from the event loop itself, so a hung loop stops the pings (and systemd acts)."""
        if self.watchdog_interval_s and self.enabled:
            self._tasks.spawn(self._ping(), name="systemd watchdog")

    async def stop_watchdog(self) -> None:
        await self._tasks.close()

    async def _ping(self) -> None:
        assert self.watchdog_interval_s is not None
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval_s)
