"""Background tasks of the supervisor and the zygote launcher: failures are seen at once."""

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from structlog.testing import capture_logs

from goondan.settings import DEFAULTS
from orchestrator.launcher import LaunchSpec, Template, ZygoteChild, ZygoteLauncher
from orchestrator.supervisor import Exit, Supervisor


class QuickLauncher:
    async def start(self) -> None:
        return None

    async def launch(self, agent: str, credential: bytes) -> ZygoteChild:
        child = ZygoteChild(4242)
        child.exit.set_result(1)  # it crashes at once
        return child

    async def aclose(self) -> None:
        return None


async def test_a_failing_task_is_logged_at_once_and_stop_all_ends_every_task() -> None:
    launcher = QuickLauncher()

    def on_exit(exit: Exit) -> None:
        raise RuntimeError(f"a bug while handling the exit of {exit.agent}")

    supervisor = Supervisor(
        ["a"], {"agent": launcher, "connector": launcher}, on_ready=lambda n: None, on_exit=on_exit
    )
    supervisor.start_watchdog()
    with capture_logs() as logs:
        supervisor.ensure_running("a")
        for _ in range(3):  # the launch, the exit, the done callback
            await asyncio.sleep(0)
    [failure] = [e for e in logs if e["event"] == "background task failed"]
    assert failure["task"] == "run a"
    assert str(failure["exc_info"]) == "a bug while handling the exit of a"
    await supervisor.stop_all(lambda name: False, grace_s=1)
    assert asyncio.all_tasks() == {asyncio.current_task()}  # the watchdog too


class BrokenLauncher(QuickLauncher):
    async def launch(self, agent: str, credential: bytes) -> ZygoteChild:
        raise RuntimeError(f"cannot launch {agent}")  # a bug, not an OSError


async def test_a_launch_that_fails_with_a_bug_ends_like_one_that_cannot_start() -> None:
    exits: list[Exit] = []
    launcher = BrokenLauncher()
    supervisor = Supervisor(
        ["a"],
        {"agent": launcher, "connector": launcher},
        on_ready=lambda n: None,
        on_exit=exits.append,
    )
    supervisor.ensure_running("a")
    await asyncio.sleep(0.01)
    [exit] = exits
    assert exit.start_error == "cannot start the agent process: cannot launch a"
    assert supervisor.slots["a"].exited.is_set()  # a stop or a respawn is not held up
    await asyncio.wait_for(supervisor.stop_all(lambda name: False, grace_s=1), 1)


async def test_an_unreadable_template_is_stopped_and_its_launches_fail(tmp_path: Path) -> None:
    spec = LaunchSpec(tmp_path, "s", "ipc://x", tmp_path, DEFAULTS)
    launcher = ZygoteLauncher(spec)
    # A template that answers garbage, then would wait for ever.
    template = await Template.adopt(
        subprocess.Popen(
            [sys.executable, "-c", "import time; print('not json', flush=True); time.sleep(60)"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
    )
    waiting: asyncio.Future[ZygoteChild] = asyncio.get_running_loop().create_future()
    launcher._launches[1] = waiting
    with capture_logs() as logs:
        await asyncio.wait_for(launcher._read(template), 10)
    assert template.returncode == -signal.SIGKILL
    assert isinstance(waiting.exception(), OSError)  # the launch fails, it does not hang
    assert any(e["event"].startswith("unreadable line from the template") for e in logs)
    await launcher.aclose()
