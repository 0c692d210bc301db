"""Background tasks with an owner.

A task nobody holds may be collected while it runs, and an exception nobody retrieves is only
reported when the task is garbage-collected, if ever. Whoever starts a background task spawns it
into its own `TaskSet` instead: the set holds the task until it ends, logs a failure at once with
the task's name (and tells the owner, if it asked to be told), and the owner's close cancels what
still runs and waits until it has ended.

    tasks = TaskSet("supervisor")
    tasks.spawn(watch_heartbeats(), name="heartbeat watchdog")
    ...
    await tasks.close()  # at shutdown: cancelled, and ended, before the owner goes on
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

T = TypeVar("T")
OnError = Callable[["asyncio.Task[Any]", BaseException], None]


class TaskSet:
    """The background tasks of one owner (`owner` names it in the log)."""

    __slots__ = ("_owner", "_on_error", "_tasks", "_closed")

    def __init__(self, owner: str, *, on_error: OnError | None = None) -> None:
        """`on_error(task, exc)` is called, after the failure is logged, for a task that
        raised (not for one that was cancelled)."""
        self._owner = owner
        self._on_error = on_error
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Run `coro` as a task of this set. Raises RuntimeError once the set is closed."""
        if self._closed:
            coro.close()  # never awaited: closed here so Python does not warn about it
            raise RuntimeError(f"{self._owner} is closed: no new background task")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def __len__(self) -> int:
        """Tasks that have not ended yet."""
        return len(self._tasks)

    def cancel(self) -> None:
        """Cancel every task (for an owner that must close without awaiting; `close` also
        waits until they have ended)."""
        for task in self._tasks:
            task.cancel()

    async def close(self, grace_s: float = 0.0) -> None:
        """Take no new task; give the running ones `grace_s` to end by themselves, then cancel
        the rest and wait until every one has ended."""
        self._closed = True
        if grace_s > 0 and self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        if self._tasks:
            tasks = set(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        structlog.get_logger().error(
            "background task failed", owner=self._owner, task=task.get_name(), exc_info=exc
        )
        if self._on_error is not None:
            self._on_error(task, exc)
