"""The web studio in a real browser (Debian's chromium, driven by Playwright): a delegation
sent with `goondan send` appears live, and its waterfall shows both agents' spans.

`GOONDAN_UPDATE_SCREENSHOT=1` writes the screenshot to docs/img/studio.png (the docs page's);
otherwise it goes to the test's temporary directory, so a test run leaves the tree clean."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import GOONDAN, REPO, wait_for, write_bundle
from tests.e2e.studio_bundle import BUNDLE, CALC

pytestmark = [pytest.mark.browser, pytest.mark.serial]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000


def test_studio_shows_a_delegation_live_and_its_waterfall(tmp_path, start_daemon, state_root):
    from playwright.sync_api import Route, expect, sync_playwright

    assert Path(CHROMIUM).exists(), (
        "the studio's test needs Debian's chromium (.ci/run installs it)"
    )
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    daemon = start_daemon(bundle, "--studio", "127.0.0.1:0")
    wait_for(lambda: (state_root / "run" / "studio.json").exists(), 20)
    found = daemon.cli("studio", "--no-browser")
    assert found.returncode == 0, found.stderr
    url = found.stdout.strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=\S{32,}", url), url

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url)
            expect(page.locator("#live")).to_have_text("live")
            for agent in ("coordinator", "worker"):
                expect(page.locator(f'#graph [data-node="{agent}"]')).to_be_visible()
            expect(page.locator("tr.request")).to_have_count(0)
            page.evaluate("window.notReloaded = true")

            failed = daemon.send("divide the cake")
            sent = daemon.send("delegate the sum")
            assert sent.returncode == 0 and "the sum is 5" in sent.stdout, sent.stderr
            assert failed.returncode == 0, failed.stderr

            # Both requests appear without a reload: the stream brought them.
            rows = page.locator("tr.request")
            expect(rows).to_have_count(2)
            assert page.evaluate("window.notReloaded") is True
            newest = rows.first
            expect(newest).to_have_attribute("data-status", "ok")
            expect(newest).to_contain_text("delegate the sum")
            expect(rows.nth(1)).to_have_attribute("data-status", "error")
            # The graph learned who delegated to whom, and shows live process facts.
            edge = page.locator('#graph [data-edge="coordinator->worker"]')
            expect(edge).to_contain_text("delegated ×2")
            worker = page.locator('#graph [data-node="worker"]')
            expect(worker).to_contain_text("pid")
            expect(worker).to_contain_text("0 restarts")

            newest.click()
            spans = page.locator("#waterfall .span-row")
            expect(spans.filter(has_text="calc__add")).to_have_count(1)
            # Runtime events come in batches, so the trace's last spans can be drawn a moment
            # after its first ones: wait for every step before reading the rows.
            expect(page.locator('#waterfall .span-row[data-kind="step"]')).to_have_count(4)
            shown = [
                (
                    row.get_attribute("data-kind"),
                    row.get_attribute("data-agent"),
                    row.get_attribute("data-name"),
                )
                for row in spans.all()
            ]
            assert ("turn", "coordinator", "turn coordinator") in shown
            assert ("tool", "coordinator", "agents__request") in shown
            assert ("turn", "worker", "turn worker") in shown
            assert ("tool", "worker", "calc__add") in shown
            assert sum(1 for kind, _, _ in shown if kind == "step") == 4
            # The worker's turn sits under the coordinator's tool call: deeper in the tree.
            names = [name for _, _, name in shown]
            assert names.index("agents__request") < names.index("turn worker")
            assert names.index("turn worker") < names.index("calc__add")
            tool = spans.filter(has_text="calc__add")
            expect(tool).to_have_attribute("data-status", "ok")
            expect(tool.locator(".span-meta")).to_contain_text("ms")
            expect(page.locator("#trace-head")).to_contain_text("coordinator → worker")
            expect(spans.filter(has_text="turn coordinator").locator(".span-meta")).to_contain_text(
                "tok"
            )
            _save_screenshot(page, tmp_path)

            # The failed request's waterfall shows the tool's error.
            rows.nth(1).click()
            broken = page.locator("#waterfall .span-row", has_text="calc__divide")
            expect(broken).to_have_attribute("data-status", "error")
            expect(broken).to_contain_text("division by zero")

            # The conversation viewer: the worker's side of the instance `cli`. Choosing the
            # instance asks for its first agent's conversation (the coordinator's): held back
            # until the worker's is shown, that older answer must not replace it.
            held: list[Route] = []
            page.route("**/api/instances/cli/coordinator", lambda route: held.append(route))
            page.click('.tabs button[data-tab="conversation"]')
            page.select_option("#conv-instance", "cli")
            page.select_option("#conv-agent", "worker")
            tool_results = page.locator("#conversation .msg.tool")
            expect(tool_results.filter(has_text="calc__add")).to_have_count(1)
            assert held, "the coordinator's conversation was never asked for"
            for route in held:
                route.fulfill(response=route.fetch())
            page.unroute("**/api/instances/cli/coordinator")
            page.wait_for_timeout(500)  # room for a late answer to be drawn, were it drawn
            expect(tool_results.filter(has_text="calc__add")).to_have_count(1)
            expect(tool_results.filter(has_text="division by zero")).to_have_count(1)
            expect(page.locator("#conversation")).to_contain_text("the sum is 5")

            # The live tail, filtered to tool events of the worker.
            page.click('.tabs button[data-tab="events"]')
            page.select_option("#f-agent", "worker")
            page.select_option("#f-type", "tool.")
            events = page.locator("#events tr.event")
            expect(events).to_have_count(4)  # called + completed, called + failed
            for row in events.all():
                assert row.get_attribute("data-agent") == "worker"
                assert (row.get_attribute("data-type") or "").startswith("tool.")
        finally:
            browser.close()


def _save_screenshot(page, tmp_path: Path) -> None:
    if os.environ.get("GOONDAN_UPDATE_SCREENSHOT"):
        target = REPO / "docs" / "img" / "studio.png"
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        target = tmp_path / "studio.png"
    page.screenshot(path=str(target), full_page=True)
    assert target.stat().st_size > 10_000


def test_a_running_request_is_cancelled_from_its_waterfall(tmp_path, start_daemon, state_root):
    from playwright.sync_api import expect, sync_playwright

    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    daemon = start_daemon(bundle, "--studio", "127.0.0.1:0")
    wait_for(lambda: (state_root / "run" / "studio.json").exists(), 20)
    url = daemon.cli("studio", "--no-browser").stdout.strip()
    sender = subprocess.Popen(
        [*GOONDAN, "send", "slow please", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url)
            row = page.locator("tr.request")
            expect(row).to_have_count(1)
            expect(row).to_have_attribute("data-status", "running")
            # Once the worker waits in its tool, the waterfall has both turns to stop.
            row.click()
            waiting = page.locator("#waterfall .span-row", has_text="calc__wait")
            expect(waiting).to_have_count(1)
            page.click("#cancel-trace")
            expect(page.locator("#cancel-trace")).to_have_text("cancelled 2")
        finally:
            browser.close()
    _, err = sender.communicate(timeout=30)
    assert sender.returncode == 1 and "E_TURN_CANCELLED" in err, err
