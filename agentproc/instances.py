"""Work queues per instanceKey: FIFO within a key, concurrent across keys."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import structlog

J = TypeVar("J")


class InstanceQueues(Generic[J]):
    """One worker task per busy key; it exits when its queue is empty (idle keys cost nothing)."""

    def __init__(self, run: Callable[[str, J], Awaitable[None]]) -> None:
        self._run = run
        self._queues: dict[str, deque[J]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def busy(self) -> int:
        return len(self._workers)

    def is_busy(self, key: str) -> bool:
        return key in self._workers

    def has_queued(self, key: str) -> bool:
        """Whether jobs wait behind the running one of `key`."""
        return bool(self._queues.get(key))

    def submit(self, key: str, job: J) -> None:
        self._queues.setdefault(key, deque()).append(job)
        if key not in self._workers:
            self._idle.clear()
            self._workers[key] = asyncio.get_running_loop().create_task(self._work(key))

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def cancel_all(self) -> None:
        for task in self._workers.values():
            task.cancel()

    async def _work(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                job = queue.popleft()
                try:
                    await self._run(key, job)
                except Exception:  # a bug in one turn must not stop the key's queue
                    structlog.get_logger().exception("job failed", instanceKey=key)
        finally:
            del self._workers[key]
            if not queue:
                del self._queues[key]
            if not self._workers:
                self._idle.set()
