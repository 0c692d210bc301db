"""A child of the orchestrator gets its credential on an inherited pipe and presents it in
its ZMTP READY, never in its argv or environment (both readable in /proc by the same user)."""

from __future__ import annotations

import pytest

from tests.fakes.fake_orchestrator import FakeOrchestrator
from tests.integration.test_connector_process import TOKEN, _setup

pytestmark = pytest.mark.timeout(30)


async def test_the_connector_presents_the_credential_from_its_inherited_pipe() -> None:
    credential = b"c0ffee" * 10
    async with FakeOrchestrator() as orch:
        _setup(orch)
        env = {"PROBE_TOKEN": TOKEN, "PROBE_MODE": "serve"}
        proc = await orch.spawn("probe-conn", orch.dir / "b", env, credential=credential)
        await orch.wait_ready("probe-conn", proc)
        assert orch.credentials["connection:probe-conn"] == credential.decode()
        # not where another process of the same user could read it
        for name in ("cmdline", "environ"):
            with open(f"/proc/{proc.pid}/{name}", "rb") as f:
                assert credential not in f.read()
        await orch.stop("probe-conn", proc)
