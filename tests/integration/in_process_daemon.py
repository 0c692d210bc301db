"""A daemon (of the quickstart swarm, unless told another bundle) serving in this test's
process (real agent processes, the real sockets), and `goondan send` as its client speaks
it. Tests using it take the `process_state` fixture: `serve` changes the umask and freezes
the collector."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from goondan.bundle import load_bundle
from goondan.cli.client import ControlClient
from goondan.paths import StatePaths
from goondan.settings import DEFAULTS, Settings
from orchestrator.daemon import Daemon
from tests.waiting import until

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart"


@contextlib.asynccontextmanager
async def serving_daemon(
    paths: StatePaths,
    settings: Settings = DEFAULTS,
    *,
    watch: bool = False,
    bundle: Path = QUICKSTART,
) -> AsyncIterator[Daemon]:
    """The daemon of `bundle`, once it serves; stopped when the block ends, and its exit code
    checked."""
    daemon = Daemon(load_bundle(bundle), None, paths, settings, watch=watch)
    serving = asyncio.get_running_loop().create_task(daemon.serve(), name="serve")
    try:
        await until(paths.info_file.exists, 30)
        yield daemon
    finally:
        daemon.request_stop()
        code, _ = await asyncio.wait_for(serving, 30)
    assert code == 0


def send(paths: StatePaths, text: str, instance_key: str = "k") -> str:
    """`goondan send TEXT` to the entry agent (blocking: run it in an executor); its answer."""
    with ControlClient(paths) as client:
        result = client.send(text, agent=None, instance_key=instance_key, timeout_s=30)
    assert result.status == "ok", result
    return result.response or ""
