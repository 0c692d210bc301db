"""Every process of a running daemon says what it is in `ps` (its /proc/PID/cmdline)."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.conftest import REPO, wait_for
from tests.e2e.test_connectors import SECRET, free_port, post
from tests.proc_table import children, title

SPARE = "goondan: template spare"


@pytest.mark.parametrize("spawn", ["zygote", "subprocess"])
def test_daemon_template_agents_and_connectors_have_titles(start_daemon, tmp_path, spawn):
    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    port = free_port()
    main = bundle / "goondan.yaml"
    main.write_text(main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}'))
    daemon = start_daemon(bundle, "--spawn", spawn, env={"WEBHOOK_SECRET": SECRET})
    wait_for(lambda: daemon.process("http-in")["status"] == "idle", timeout=20)
    status, body = post(port, {"text": "What is 19 plus 23?", "wait": True})
    assert status == 200, body
    rows = {p["name"]: p for p in daemon.status()["processes"]}
    assert title(daemon.proc.pid) == "goondan: orchestrator default"
    assert title(rows["responder"]["pid"]) == "goondan: agent responder (default)"
    assert title(rows["http-in"]["pid"]) == "goondan: connector http-in"
    templates = [p for p in children(daemon.proc.pid) if title(p) == "goondan: template"]
    if spawn == "zygote":
        [template] = templates
        assert rows["responder"]["pid"] in children(template)
        # The spare the template keeps forked ahead is no agent: `status` does not list it.
        wait_for(lambda: [p for p in children(template) if title(p) == SPARE], timeout=20)
        [spare] = [p for p in children(template) if title(p) == SPARE]
        assert spare not in {p["pid"] for p in daemon.status()["processes"]}
    else:
        assert templates == []
