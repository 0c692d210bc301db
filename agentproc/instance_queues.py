"""Work queues per instanceKey: FIFO within a key, concurrent across keys.

A key with work has one worker task on it. Workers that run out of work park and are handed
the next idle key that gets work, so a busy agent does not create (and register, and collect)
a task per turn; at most `max_parked` wait, and the rest end. A job runs in its worker's context:
a context variable a job sets and does not reset is seen by that worker's next job (the turn
loop resets its own).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import structlog

from goondan.settings import DEFAULTS
from ipc.tasks import TaskSet

J = TypeVar("J")


class InstanceQueues(Generic[J]):
    def __init__(
        self,
        run: Callable[[str, J], Awaitable[None]],
        *,
        max_parked: int = DEFAULTS.agent.max_parked_workers,
    ) -> None:
        self._run = run
        self._max_parked = max_parked  # idle workers kept for the next keys
        self._queues: dict[str, deque[J]] = {}
        self._busy: set[str] = set()  # keys a worker is on (or has been handed)
        self._parked: list[asyncio.Future[str]] = []
        self._workers = TaskSet("instance queues")
        self._idle_waiter: asyncio.Future[None] | None = None

    @property
    def busy(self) -> int:
        return len(self._busy)

    def is_busy(self, key: str) -> bool:
        return key in self._busy

    def has_queued(self, key: str) -> bool:
        """Whether jobs wait behind the running one of `key`."""
        return bool(self._queues.get(key))

    def submit(self, key: str, job: J) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(job)
        if key in self._busy:
            return
        self._busy.add(key)  # now: a second job for `key` must queue behind this one
        while self._parked:
            parked = self._parked.pop()
            if not parked.done():  # a parked worker cancelled at shutdown is skipped
                parked.set_result(key)
                return
        self._workers.spawn(self._worker(key), name="instance worker")

    def remove_queued(self, match: Callable[[J], bool]) -> list[tuple[str, J]]:
        """Take the queued (not yet running) jobs `match` accepts out of every queue."""
        removed: list[tuple[str, J]] = []
        for key, queue in self._queues.items():
            kept = [job for job in queue if not match(job)]
            if len(kept) != len(queue):
                removed += [(key, job) for job in queue if match(job)]
                queue.clear()
                queue.extend(kept)
        return removed

    async def wait_idle(self) -> None:
        if not self._busy:
            return
        if self._idle_waiter is None:
            self._idle_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._idle_waiter)

    def cancel_all(self) -> None:
        self._workers.cancel()

    async def aclose(self) -> None:
        """Cancel every worker, busy or parked, and wait until each has ended."""
        await self._workers.close()

    async def _worker(self, key: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            queue = self._queues[key]
            try:
                while queue:
                    job = queue.popleft()
                    try:
                        await self._run(key, job)
                    except Exception:  # a bug in one turn must not stop the key's queue
                        structlog.get_logger().exception("job failed", instanceKey=key)
            finally:
                self._busy.discard(key)
                if not queue:
                    del self._queues[key]
                if not self._busy and self._idle_waiter is not None:
                    self._idle_waiter.set_result(None)
                    self._idle_waiter = None
            if len(self._parked) >= self._max_parked:
                return
            parked: asyncio.Future[str] = loop.create_future()
            self._parked.append(parked)
            key = await parked
