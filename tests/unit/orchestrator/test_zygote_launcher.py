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


def _has_pydantic(pid: int) -> bool:
    return "pydantic_core" in Path(f"/proc/{pid}/maps").read_text()


async def test_the_early_template_is_taken_over_and_learns_new_providers(tmp_path: Path) -> None:
    start_template_early(str(QUICKSTART))
    early = launcher_module._head_start
    assert early is not None
    spec = LaunchSpec(QUICKSTART, "default", f"ipc://{tmp_path}/a.sock", tmp_path, DEFAULTS)
    launcher = ZygoteLauncher(spec)
    try:
        await launcher.start()
        template = launcher._process
        assert template is not None and template.pid == early.pid  # no second template
        assert launcher_module._head_start is None
        agent = await launcher.launch("assistant", b"k" * 32)  # no orchestrator: it waits
        assert not _has_pydantic(template.pid)
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
    assert template.returncode == 0  # EOF on its stdin ended it
