"""The supervisor's rules with a launcher that only records (the processes are not the point)."""

import asyncio

from orchestrator.supervisor import Exit, Supervisor


class SlowChild:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def wait(self) -> int:
        return await self.done

    def terminate(self) -> None:
        if not self.done.done():
            self.done.set_result(-15)

    def kill(self) -> None:
        if not self.done.done():
            self.done.set_result(-9)


class RecordingLauncher:
    def __init__(self) -> None:
        self.children: list[SlowChild] = []

    async def start(self) -> None:
        return None

    async def launch(self, agent: str) -> SlowChild:
        await asyncio.sleep(0.01)  # a launch takes a while: callers may ask again meanwhile
        child = SlowChild(1000 + len(self.children))
        self.children.append(child)
        return child

    async def aclose(self) -> None:
        return None


async def test_starting_twice_while_a_launch_is_under_way_starts_one_process():
    launcher = RecordingLauncher()
    exits: list[Exit] = []
    supervisor = Supervisor(
        ["a"],
        {"agent": launcher, "connector": launcher},
        on_ready=lambda n: None,
        on_exit=exits.append,
    )
    supervisor.ensure_running("a")
    supervisor.ensure_running("a")
    await asyncio.sleep(0.05)
    supervisor.ensure_running("a")  # running now: still one
    assert len(launcher.children) == 1
    launcher.children[0].kill()
    await asyncio.sleep(0.01)
    [exit] = exits
    assert exit.crashed and exit.code == -9 and not exit.was_ready
    supervisor.respawn("a")
    supervisor.ensure_running("a")  # the router asks too, at the same moment
    await asyncio.sleep(0.05)
    assert len(launcher.children) == 2
    assert supervisor.slots["a"].restarts == 1
    launcher.children[1].kill()
    await asyncio.sleep(0.01)


async def test_a_stop_during_the_launch_stops_the_new_process():
    launcher = RecordingLauncher()
    exits: list[Exit] = []
    supervisor = Supervisor(
        ["a"],
        {"agent": launcher, "connector": launcher},
        on_ready=lambda n: None,
        on_exit=exits.append,
    )
    supervisor.ensure_running("a")
    await asyncio.wait_for(supervisor.stop("a", lambda name: False, grace_s=1), 2)
    assert len(launcher.children) == 1 and launcher.children[0].done.result() == -15
    [exit] = exits
    assert not exit.crashed  # a requested stop is not a crash
    assert supervisor.slots["a"].status == "terminated"
