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
        self.credentials: list[bytes] = []

    async def start(self) -> None:
        return None

    async def launch(self, agent: str, credential: bytes) -> SlowChild:
        self.credentials.append(credential)
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


def recording_supervisor(exits: list[Exit]) -> tuple[Supervisor, RecordingLauncher]:
    launcher = RecordingLauncher()
    supervisor = Supervisor(
        ["a"],
        {"agent": launcher, "connector": launcher},
        on_ready=lambda n: None,
        on_exit=exits.append,
    )
    return supervisor, launcher


async def test_each_launch_has_its_own_credential_until_its_process_exits():
    exits: list[Exit] = []
    supervisor, launcher = recording_supervisor(exits)
    slot = supervisor.slots["a"]
    assert slot.credential is None
    supervisor.ensure_running("a")
    assert slot.credential is not None  # already while the launch is under way
    await asyncio.sleep(0.05)
    assert launcher.credentials == [slot.credential]
    launcher.children[0].kill()
    await asyncio.sleep(0.01)
    assert slot.credential is None  # the exited process's connection is admitted no more
    supervisor.respawn("a")
    await asyncio.sleep(0.05)
    assert slot.credential == launcher.credentials[1] != launcher.credentials[0]
    launcher.children[1].kill()
    await asyncio.sleep(0.01)


async def test_a_crash_after_ready_does_not_count_as_a_start_up_crash():
    exits: list[Exit] = []
    supervisor, launcher = recording_supervisor(exits)
    supervisor.ensure_running("a")
    await asyncio.sleep(0.05)
    launcher.children[0].kill()  # before ready
    await asyncio.sleep(0.01)
    supervisor.respawn("a")
    await asyncio.sleep(0.05)
    supervisor.mark_ready("a", launcher.children[1].pid)
    launcher.children[1].kill()  # after ready
    await asyncio.sleep(0.01)
    assert [(e.was_ready, e.startup_crashes, e.consecutive_crashes) for e in exits] == [
        (False, 1, 1),
        (True, 0, 2),
    ]
