"""Waiting, in a test's event loop, for what another process or socket does."""

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], object], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.005)
