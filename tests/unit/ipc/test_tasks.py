"""TaskSet: a background task's failure is logged when it happens, and close leaves none."""

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from ipc.tasks import TaskSet


async def fail(message: str) -> None:
    await asyncio.sleep(0)
    raise ValueError(message)


async def test_a_failure_is_logged_at_once_with_the_tasks_name() -> None:
    failed: list[tuple[str, BaseException]] = []
    tasks = TaskSet("owner", on_error=lambda task, exc: failed.append((task.get_name(), exc)))
    with capture_logs() as logs:
        task = tasks.spawn(fail("boom"), name="the failing one")
        # Held here, so nothing can be garbage-collected: the log cannot come from GC.
        await asyncio.wait({task})
        await asyncio.sleep(0)  # done callbacks run one loop turn after the task ends
        assert [(e["event"], e["owner"], e["task"]) for e in logs] == [
            ("background task failed", "owner", "the failing one")
        ]
        assert isinstance(logs[0]["exc_info"], ValueError)
    assert [(name, str(exc)) for name, exc in failed] == [("the failing one", "boom")]
    assert len(tasks) == 0


async def test_a_cancelled_or_successful_task_is_not_reported() -> None:
    tasks = TaskSet("owner")
    with capture_logs() as logs:
        done = tasks.spawn(asyncio.sleep(0), name="done")
        waiting = tasks.spawn(asyncio.sleep(60), name="waiting")
        await done
        waiting.cancel()
        await asyncio.wait({waiting})
        await asyncio.sleep(0)
    assert logs == []
    assert len(tasks) == 0


async def test_close_cancels_and_waits_for_every_task() -> None:
    tasks = TaskSet("owner")
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.01)  # winding down takes a while: close waits for it
            ended.append(name)

    spawned = [tasks.spawn(forever(n), name=n) for n in ("a", "b")]
    await asyncio.sleep(0)
    await tasks.close()
    assert sorted(ended) == ["a", "b"]
    assert all(t.cancelled() for t in spawned)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_close_gives_running_tasks_their_grace_period() -> None:
    tasks = TaskSet("owner")
    quick = tasks.spawn(asyncio.sleep(0.01, "finished"), name="quick")
    slow = tasks.spawn(asyncio.sleep(60), name="slow")
    await tasks.close(grace_s=1.0)
    assert quick.result() == "finished"
    assert slow.cancelled()


async def test_no_task_is_taken_after_close() -> None:
    tasks = TaskSet("owner")
    await tasks.close()
    coro: Any = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="owner is closed"):
        tasks.spawn(coro)
    assert coro.cr_frame is None  # closed, so no "never awaited" warning
