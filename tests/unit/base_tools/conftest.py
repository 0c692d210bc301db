"""Fixtures for the @goondan/base tool tests: a real ToolContext on a temporary workdir, and an
environment without any operator setting or token (each test sets what it needs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import structlog

from goondan import ToolContext

POLICY_PREFIXES = ("GOONDAN_FS_", "GOONDAN_BASH_", "GOONDAN_HTTP_")
SERVICE_ENVS = (
    "TELEGRAM_BOT_TOKEN",
    "BOT_TOKEN",
    "TELEGRAM_TOKEN",
    "BRAIN_TELEGRAM_BOT_TOKEN",
    "TELEGRAM_API_BASE_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_TOKEN",
    "BRAIN_SLACK_BOT_TOKEN",
    "SLACK_API_BASE_URL",
)


def make_ctx(workdir: Path) -> ToolContext:
    return ToolContext(
        agent_name="tester",
        instance_key="k1",
        turn_id="turn-1",
        trace_id="trace-1",
        tool_call_id="call-1",
        message=None,
        workdir=workdir,
        logger=structlog.get_logger(),
        runtime=None,  # type: ignore[arg-type]  # no base tool here uses the runtime
    )


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(POLICY_PREFIXES) or name in SERVICE_ENVS:
            monkeypatch.delenv(name)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "work"


@pytest.fixture
def ctx(workdir: Path) -> ToolContext:
    return make_ctx(workdir)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workdir, with a file the sandbox must keep the tools away from."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("top secret\n", encoding="utf-8")
    return directory
