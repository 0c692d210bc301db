"""A connector's event is routed and acknowledged once its journal line is fsync'd, and that
fsync runs off the orchestrator's event loop: while a slow disk holds it, the daemon (in this
process, with the webhook connector and the agents as real processes) goes on answering."""

from __future__ import annotations

import asyncio
import shutil
import socket
from pathlib import Path

import pytest

from goondan.paths import StatePaths
from tests.e2e.test_connectors import SECRET, free_port, post
from tests.held_disk import HeldDisk
from tests.integration.in_process_daemon import send, serving_daemon
from tests.waiting import until

WEBHOOK = Path(__file__).resolve().parents[2] / "configs" / "webhook"


async def test_the_daemon_routes_on_while_an_events_fsync_is_held(
    directory: Path, process_state: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = directory / "webhook"
    shutil.copytree(WEBHOOK, bundle)
    port = free_port()
    main = bundle / "goondan.yaml"
    main.write_text(main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}'))
    monkeypatch.setenv("WEBHOOK_SECRET", SECRET)
    paths = StatePaths.at(directory / "state")
    loop = asyncio.get_running_loop()

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    async with serving_daemon(paths, bundle=bundle):
        await until(listening, 20)
        # The agents and the connector run (their processes began before the disk is held).
        status, body = await loop.run_in_executor(
            None, post, port, {"text": "1 plus 2", "wait": True}
        )
        assert (status, body["reply"]) == (200, "1 plus 2 is 3.")
        disk = HeldDisk(monkeypatch, off_the_loop=True)
        try:
            event = loop.run_in_executor(None, post, port, {"text": "3 plus 4", "wait": True})
            await until(disk.running.is_set, 20, what="the event's fsync under way")
            answer = await loop.run_in_executor(None, send, paths, "5 plus 6", "other")
            assert answer == "5 plus 6 is 11."  # routed, answered, while the fsync waits
            assert not event.done()  # the event itself: not routed before it is durable
        finally:
            disk.release()
        status, body = await event
        assert (status, body["reply"]) == (200, "3 plus 4 is 7.")
