"""The zygote launcher: it takes over the template `goondan run` started early, and a reload's
new providers reach the running template (its agents are not disturbed)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from goondan.settings import DEFAULTS
from orchestrator import launcher as launcher_module
from orchestrator.launcher import LaunchSpec, ZygoteLauncher, start_template_early

pytestmark = pytest.mark.timeout(60)

QUICKSTART = Path(__file__).resolve().parents[3] / "configs" / "quickstart"


def _spec(tmp_path: Path) -> LaunchSpec:
    return LaunchSpec(QUICKSTART, "default", f"ipc://{tmp_path}/a.sock", tmp_path, DEFAULTS)


def _has_pydantic(pid: int) -> bool:
    """Whether the process has the openai SDK's pydantic (a shared object) mapped."""
    return "pydantic_core" in Path(f"/proc/{pid}/maps").read_text()


async def test_the_early_template_is_taken_over_and_forks_agents(tmp_path: Path) -> None:
    start_template_early(str(QUICKSTART))  # a fork of this process
    early = launcher_module._head_start
    assert early is not None
    launcher = ZygoteLauncher(_spec(tmp_path))
    try:
        await launcher.start()
        template = launcher._process
        assert template is not None and template.pid == early.pid  # no second template
        assert launcher_module._head_start is None
        agent = await launcher.launch("assistant", b"k" * 32)  # no orchestrator: it waits
        assert f"\nPPid:\t{early.pid}\n" in Path(f"/proc/{agent.pid}/status").read_text()
        agent.kill()
        assert await asyncio.wait_for(agent.wait(), 10) == -9
    finally:
        await launcher.aclose()
    assert template.returncode == 0  # EOF on its stdin ended it


async def test_a_reloads_new_provider_reaches_the_running_template(tmp_path: Path) -> None:
    launcher = ZygoteLauncher(_spec(tmp_path))  # a new interpreter: nothing imported yet
    try:
        await launcher.start()
        template = launcher._process
        assert template is not None
        agent = await launcher.launch("assistant", b"k" * 32)
        assert not _has_pydantic(template.pid)  # the quickstart's Models are all scripted
        launcher.set_providers(("openai", "scripted"))
        # The template imports the SDK before its next fork; the first agent lives on.
        second = await launcher.launch("researcher", b"j" * 32)
        assert _has_pydantic(template.pid) and launcher._process is template
        os.kill(agent.pid, 0)
        for child in (agent, second):
            child.kill()
            assert await asyncio.wait_for(child.wait(), 10) == -9
    finally:
        await launcher.aclose()
    assert template.returncode == 0
