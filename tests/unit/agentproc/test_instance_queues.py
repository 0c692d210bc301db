"""Work per instanceKey: in order within a key, at once across keys, workers reused."""

import asyncio

import pytest

from agentproc.instance_queues import InstanceQueues


class Recorder:
    def __init__(self) -> None:
        self.log: list[tuple[str, str, str]] = []  # (event, key, job)
        self.gates: dict[str, asyncio.Event] = {}
        self.tasks: set[asyncio.Task[object] | None] = set()

    async def run(self, key: str, job: str) -> None:
        self.tasks.add(asyncio.current_task())
        self.log.append(("start", key, job))
        gate = self.gates.get(job)
        if gate is not None:
            await gate.wait()
        if job == "boom":
            raise RuntimeError("a bug in one turn")
        self.log.append(("end", key, job))


async def test_jobs_of_a_key_run_in_order_and_keys_run_at_once():
    rec = Recorder()
    queues = InstanceQueues(rec.run)
    rec.gates["a1"] = asyncio.Event()
    queues.submit("a", "a1")
    queues.submit("a", "a2")
    queues.submit("b", "b1")
    await asyncio.sleep(0.01)
    # a2 waits behind a1; b1 did not wait for a1
    assert ("end", "b", "b1") in rec.log and ("start", "a", "a2") not in rec.log
    assert queues.is_busy("a") and queues.has_queued("a") and not queues.is_busy("b")
    rec.gates["a1"].set()
    await queues.wait_idle()
    a_events = [(e, j) for e, k, j in rec.log if k == "a"]
    assert a_events == [("start", "a1"), ("end", "a1"), ("start", "a2"), ("end", "a2")]
    assert queues.busy == 0


async def test_a_key_handed_to_a_parked_worker_still_queues_its_second_job():
    rec = Recorder()
    queues = InstanceQueues(rec.run)
    queues.submit("a", "warm")
    await queues.wait_idle()  # the worker parks
    rec.gates["k1"] = asyncio.Event()
    queues.submit("k", "k1")  # handed to the parked worker, which has not woken yet
    queues.submit("k", "k2")
    await asyncio.sleep(0.01)
    assert [j for e, k, j in rec.log if k == "k"] == ["k1"]
    rec.gates["k1"].set()
    await queues.wait_idle()
    assert [j for e, k, j in rec.log if k == "k" and e == "end"] == ["k1", "k2"]
    assert len(rec.tasks) == 1  # one worker did it all


async def test_a_failing_job_does_not_stop_its_key():
    rec = Recorder()
    queues = InstanceQueues(rec.run)
    queues.submit("a", "boom")
    queues.submit("a", "after")
    await queues.wait_idle()
    assert ("end", "a", "after") in rec.log


async def test_cancel_all_stops_running_jobs_and_parked_workers():
    rec = Recorder()
    queues = InstanceQueues(rec.run, max_parked=4)
    for i in range(4 + 3):  # more than are kept parked
        queues.submit(f"idle{i}", "quick")
    await queues.wait_idle()
    rec.gates["stuck"] = asyncio.Event()
    queues.submit("s", "stuck")
    await asyncio.sleep(0.01)
    queues.cancel_all()
    await asyncio.wait_for(queues.wait_idle(), 1)
    assert ("end", "s", "stuck") not in rec.log
    await asyncio.sleep(0.01)
    queues.submit("t", "new")  # parked workers were cancelled: a new one starts
    await asyncio.wait_for(queues.wait_idle(), 1)
    assert ("end", "t", "new") in rec.log


async def test_two_waiters_for_idle_both_wake():
    rec = Recorder()
    queues = InstanceQueues(rec.run)
    rec.gates["x"] = asyncio.Event()
    queues.submit("a", "x")
    waiters = [asyncio.ensure_future(queues.wait_idle()) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waiters)
    rec.gates["x"].set()
    await asyncio.wait_for(asyncio.gather(*waiters), 1)


@pytest.mark.parametrize("keys", [1, 50])
async def test_many_jobs_all_run_once(keys):
    rec = Recorder()
    queues = InstanceQueues(rec.run)
    for i in range(200):
        queues.submit(f"k{i % keys}", f"j{i}")
    await queues.wait_idle()
    assert sorted(j for e, k, j in rec.log if e == "end") == sorted(f"j{i}" for i in range(200))
