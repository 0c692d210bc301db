"""The daemon owns its background tasks: once `serve` returns, none of them is left.

The daemon runs in this process, on uvloop as `goondan run` runs it, with real agent processes
(forked by the template), the bundle watch and the systemd watchdog on; a reload is under way
when the stop comes.
"""

import asyncio
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from goondan.paths import StatePaths
from ipc import wire
from tests.integration.in_process_daemon import serving_daemon
from tests.waiting import until


@pytest.fixture
def notify_socket(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A NOTIFY_SOCKET as systemd's, with its watchdog on: the daemon pings it from a task."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(directory / "notify"))
    sock.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(directory / "notify"))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    yield sock
    sock.close()


def test_a_stopped_daemon_leaves_no_task_behind(
    directory: Path, process_state: None, notify_socket: socket.socket
) -> None:
    notified: list[str] = []

    def read_notifications() -> None:
        try:
            while True:
                notified.extend(notify_socket.recv(4096).decode().split("\n"))
        except BlockingIOError:
            pass

    async def scenario() -> list[str]:
        # Read as systemd does, at once: the daemon's sends would block once its queue is full.
        loop = asyncio.get_running_loop()
        loop.add_reader(notify_socket.fileno(), read_notifications)
        async with serving_daemon(StatePaths.at(directory / "state"), watch=True) as daemon:
            question = wire.Delegate(
                input="What is 19 plus 23?", instance_key="t", source=wire.Source("cli", "test")
            )
            answer = await asyncio.wait_for(daemon.ask(daemon.entry_agent, question), 30)
            assert answer.status == "ok", answer
            await until(lambda: "WATCHDOG=1" in notified)
            signal.raise_signal(signal.SIGHUP)  # a reload, still under way when the stop comes
            await until(lambda: "RELOADING=1" in notified)
        loop.remove_reader(notify_socket.fileno())
        return [task.get_name() for task in asyncio.all_tasks() - {asyncio.current_task()}]

    assert uvloop.run(scenario()) == []
