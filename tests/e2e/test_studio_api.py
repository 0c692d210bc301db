"""The studio's HTTP API, spoken to with aiohttp's client: a real daemon (`run --studio`), a
real delegation, real runtime-event files."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
from typing import Any

import aiohttp

from tests.e2e.conftest import GOONDAN, REPO, goondan, wait_for, write_bundle
from tests.e2e.studio_bundle import BUNDLE, CALC


def _studio(state_root) -> tuple[str, str]:
    info_file = state_root / "run" / "studio.json"
    wait_for(info_file.exists, 20)
    info = json.loads(info_file.read_text())
    return info["url"], info["token"]


async def test_every_request_needs_the_token(tmp_path, start_daemon, state_root):
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    start_daemon(bundle, "--studio", "127.0.0.1:0")
    url, token = _studio(state_root)
    assert stat.S_IMODE((state_root / "studio.token").stat().st_mode) == 0o600
    assert stat.S_IMODE((state_root / "run" / "studio.json").stat().st_mode) == 0o600
    async with aiohttp.ClientSession() as http:
        for path in ("", "studio.js", "api/swarm", "api/requests", "api/stream", "api/events"):
            async with http.get(url + path) as r:
                assert r.status == 401, path
        async with http.get(url + "api/swarm", params={"token": "x" * 43}) as r:
            assert r.status == 401
        async with http.get(url + "api/swarm", headers={"Authorization": "Bearer " + token}) as r:
            assert r.status == 200
    # The token once in the query, then the cookie it sets (a jar that keeps cookies of an
    # IP address, as browsers do).
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(url, params={"token": token}) as r:
            assert r.status == 200
            assert r.url.query == {}  # redirected out of the address bar
            page = await r.text()
            assert "<title>goondan studio</title>" in page
        async with http.get(url + "studio.js") as r:
            assert r.status == 200 and "EventSource" in await r.text()
        async with http.get(url + "api/swarm") as r:
            assert r.status == 200


async def test_json_endpoints_show_a_delegation(tmp_path, start_daemon, state_root):
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    daemon = start_daemon(bundle, "--studio", "127.0.0.1:0")
    url, token = _studio(state_root)
    sent = daemon.send("delegate the sum")
    assert sent.returncode == 0, sent.stderr
    failed = daemon.send("divide the cake", "--instance", "other")
    assert failed.returncode == 0, failed.stderr
    auth = {"Authorization": "Bearer " + token}
    async with aiohttp.ClientSession(headers=auth) as http:

        async def get(path: str, **params: str) -> Any:
            async with http.get(url + path, params=params) as r:
                assert r.status == 200, (path, r.status, await r.text())
                return await r.json()

        async def requests() -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = await get("api/requests")
            return rows

        # Each agent writes its events in batches of its own (within about a second).
        for _ in range(100):
            rows = await requests()
            if sorted(r["events"] for r in rows) == [16, 16]:
                break
            await asyncio.sleep(0.1)
        by_input = {r["input"]: r for r in rows}
        ok, broken = by_input["delegate the sum"], by_input["divide the cake"]
        assert ok["status"] == "ok" and ok["agents"] == ["coordinator", "worker"]
        assert ok["agent"] == "coordinator" and ok["instanceKey"] == "cli"
        assert ok["source"] == "cli:send" and ok["tokens"] > 0 and ok["durationMs"] > 0
        assert broken["status"] == "error" and broken["errors"] == 1

        trace = await get("api/traces/" + ok["traceId"][:8])  # a unique prefix will do
        assert trace["traceId"] == ok["traceId"]
        spans = {(s["kind"], s["agent"], s["name"]): s for s in trace["spans"]}
        coordinator_turn = spans["turn", "coordinator", "turn coordinator"]
        ask = spans["tool", "coordinator", "agents__request"]
        worker_turn = spans["turn", "worker", "turn worker"]
        add = spans["tool", "worker", "calc__add"]
        assert coordinator_turn["parentSpanId"] is None
        assert worker_turn["parentSpanId"] == ask["spanId"]  # across processes
        assert add["status"] == "ok" and add["durationMs"] >= 0
        assert json.loads(add["arguments"]) == {"a": 2, "b": 3}
        assert coordinator_turn["outputTokens"] > 0
        assert sum(1 for s in trace["spans"] if s["kind"] == "step") == 4
        bad = await get("api/traces/" + broken["traceId"])
        divide = next(s for s in bad["spans"] if s["name"] == "calc__divide")
        assert divide["status"] == "error" and divide["error"] == "division by zero"
        assert divide["errorCode"] == "E_TOOL"
        async with http.get(url + "api/traces/00000000") as r:
            assert r.status == 404

        swarm = await get("api/swarm")
        assert swarm["entryAgent"] == "coordinator"
        procs = {p["name"]: p for p in swarm["processes"]}
        assert procs["worker"]["kind"] == "agent" and procs["worker"]["pid"] > 0
        assert procs["worker"]["restarts"] == 0
        assert swarm["delegations"] == [{"from": "coordinator", "to": "worker", "count": 2}]

        tools = await get("api/events", agent="worker", type="tool.")
        assert [e["type"] for e in tools] == [
            "tool.called",
            "tool.completed",
            "tool.called",
            "tool.failed",
        ]
        assert await get("api/events", trace=ok["traceId"][:10], type="turn.completed") != []
        assert all(
            e["traceId"] == ok["traceId"] for e in await get("api/events", trace=ok["traceId"])
        )

        instances = {r["instanceKey"]: r for r in await get("api/instances")}
        assert instances["cli"]["agents"] == ["coordinator", "worker"]
        assert "other" in instances
        conversation = await get("api/instances/cli/worker")
        roles = [m["role"] for m in conversation["messages"]]
        assert roles == ["user", "assistant", "tool", "assistant"]
        assert conversation["messages"][-1]["content"] == "the sum is 5"
        async with http.get(url + "api/instances/nobody/worker") as r:
            assert r.status == 404


async def test_a_trace_opened_as_its_request_answers_shows_to_its_end(
    tmp_path, start_daemon, state_root
):
    """Agents write their runtime events in batches, up to a second after a turn; opening a
    trace has them write what they hold first, so a request that has just answered shows
    every span ended."""
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    daemon = start_daemon(bundle, "--studio", "127.0.0.1:0")
    url, token = _studio(state_root)
    sent = daemon.send("delegate the sum", "--json")
    assert sent.returncode == 0, sent.stderr
    trace_id = json.loads(sent.stdout)["traceId"]
    auth = {"Authorization": "Bearer " + token}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.get(url + "api/traces/" + trace_id) as r:
            assert r.status == 200, await r.text()
            trace = await r.json()
    turns = {s["agent"]: s["status"] for s in trace["spans"] if s["kind"] == "turn"}
    assert turns == {"coordinator": "ok", "worker": "ok"}
    assert all(s["status"] != "running" for s in trace["spans"])


async def test_stream_sends_the_swarm_then_new_events(tmp_path, start_daemon, state_root):
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    daemon = start_daemon(bundle, "--studio", "127.0.0.1:0")
    url, token = _studio(state_root)
    auth = {"Authorization": "Bearer " + token}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.get(url + "api/stream", params={"agent": "worker"}) as stream:
            assert stream.status == 200
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            first = await _next_event(stream)
            assert first[0] == "swarm"
            assert {p["name"] for p in first[1]["processes"]} == {"coordinator", "worker"}
            send = asyncio.ensure_future(asyncio.to_thread(daemon.send, "delegate live"))
            seen: list[dict[str, Any]] = []
            swarms: list[dict[str, Any]] = []
            while not any(e["type"] == "turn.completed" for e in seen):
                kind, data = await asyncio.wait_for(_next_event(stream), 30)
                (seen if kind == "runtime" else swarms).append(data)
            assert (await send).returncode == 0
            # Filtered to the worker's events, in order, live.
            assert {e["agentName"] for e in seen} == {"worker"}
            types = [e["type"] for e in seen]
            assert (
                types.index("turn.started")
                < types.index("tool.called")
                < types.index("turn.completed")
            )
            assert any(e["data"].get("toolName") == "calc__add" for e in seen)
            # The graph was sent again once the processes started.
            assert any(p["pid"] for s in swarms for p in s["processes"])


async def _next_event(stream: aiohttp.ClientResponse) -> tuple[str, dict[str, Any]]:
    kind, data = "", ""
    while True:
        line = (await stream.content.readline()).decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data += line[6:]
        elif line == "" and kind:
            return kind, json.loads(data)


def test_studio_command_says_where_it_is_or_why_not(tmp_path, start_daemon, state_root):
    none = goondan("studio", "--state-root", str(state_root))
    assert none.returncode == 1 and "no orchestrator running" in none.stderr
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    daemon = start_daemon(bundle)
    off = daemon.cli("studio")
    assert off.returncode == 1 and "serves no studio" in off.stderr and "--studio" in off.stderr
    assert off.stdout == ""


def test_studio_address_is_checked_before_the_start(tmp_path, state_root):
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    remote = goondan("run", str(bundle), "--state-root", str(state_root), "--studio", "0.0.0.0:0")
    assert remote.returncode == 2
    assert "not a loopback address" in remote.stderr and "--studio-allow-remote" in remote.stderr
    bad = goondan(
        "run",
        str(bundle),
        "--state-root",
        str(state_root),
        env={**os.environ, "GOONDAN_STUDIO": "localhost"},
    )
    assert bad.returncode == 2 and "HOST:PORT" in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = goondan(
            "run", str(bundle), "--state-root", str(state_root), "--studio", f"127.0.0.1:{port}"
        )
    assert busy.returncode == 1 and "the studio cannot listen" in busy.stderr
    assert not (state_root / "run" / "orchestrator.json").exists()


def test_studio_from_the_environment_and_a_stable_token(tmp_path, start_daemon, state_root):
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    daemon = start_daemon(bundle, env={"GOONDAN_STUDIO": "127.0.0.1:0"})
    url, token = _studio(state_root)
    printed = daemon.cli("studio", "--no-browser")
    assert printed.returncode == 0 and printed.stdout.strip() == f"{url}?token={token}"
    # A browser opens where there is a display ($BROWSER is the one `webbrowser` runs).
    opened = tmp_path / "opened"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    browser.chmod(0o755)
    shown = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    for display in ({}, {"DISPLAY": ":0"}):
        env = {**shown, **display, "BROWSER": f"{browser} %s"}
        proc = goondan("studio", "--state-root", str(state_root), env=env)
        assert proc.returncode == 0 and proc.stdout.strip() == f"{url}?token={token}"
    assert opened.read_text().splitlines() == [f"{url}?token={token}"]  # with a display only
    daemon.stop()
    assert not (state_root / "run" / "studio.json").exists()  # gone with the daemon
    start_daemon(bundle, "--studio", "127.0.0.1:0")
    assert _studio(state_root)[1] == token  # a bookmark still works after a restart


async def test_a_connector_is_in_the_graph_and_its_requests_listed(tmp_path, start_daemon):
    from tests.e2e.test_connectors import SECRET, free_port, post

    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    port = free_port()
    main = bundle / "goondan.yaml"
    main.write_text(main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}'))
    daemon = start_daemon(bundle, "--studio", "127.0.0.1:0", env={"WEBHOOK_SECRET": SECRET})
    url, token = _studio(daemon.state_root)

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, 20)
    status, answer = await asyncio.to_thread(post, port, {"text": "hello", "user": "alice"})
    assert status in (200, 202), answer
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + token}) as http:
        async with http.get(url + "api/swarm") as r:
            swarm = await r.json()
        connector = next(p for p in swarm["processes"] if p["name"] == "http-in")
        assert connector["kind"] == "connector" and connector["pid"] > 0
        assert swarm["connectors"] == {"http-in": swarm["entryAgent"]}
        for _ in range(100):
            async with http.get(url + "api/requests") as r:
                rows = await r.json()
            if rows and rows[0]["status"] != "running":
                break
            await asyncio.sleep(0.1)
        assert rows[0]["agent"] == swarm["entryAgent"] and rows[0]["status"] == "ok"
        assert rows[0]["source"].startswith("connector")


async def test_cancel_stops_a_running_trace(tmp_path, start_daemon, state_root):
    bundle = write_bundle(tmp_path / "bundle", BUNDLE, {"calc.py": CALC})
    daemon = start_daemon(bundle, "--studio", "127.0.0.1:0")
    url, token = _studio(state_root)
    sender = subprocess.Popen(
        [*GOONDAN, "send", "slow please", "--json", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "api/traces/" + "a" * 32 + "/cancel") as r:
            assert r.status == 401  # the token, as for every request
        auth = {"Authorization": "Bearer " + token}
        waiting: list[dict[str, Any]] = []
        for _ in range(200):  # until the worker waits in its tool
            async with http.get(
                url + "api/events", params={"type": "tool.called"}, headers=auth
            ) as r:
                waiting = [e for e in await r.json() if e["data"].get("toolName") == "calc__wait"]
            if waiting:
                break
            await asyncio.sleep(0.1)
        assert waiting, "the worker never called calc__wait"
        trace = waiting[0]["traceId"]
        async with http.post(url + "api/traces/not-a-trace/cancel", headers=auth) as r:
            assert r.status == 400
        async with http.post(url + f"api/traces/{trace}/cancel", headers=auth) as r:
            assert r.status == 200
            cancelled = (await r.json())["cancelled"]
    assert {t["agent"] for t in cancelled} == {"coordinator", "worker"}
    assert {t["traceId"] for t in cancelled} == {trace}
    out, err = sender.communicate(timeout=30)
    assert sender.returncode == 1 and "E_TURN_CANCELLED" in out + err, (out, err)
    assert daemon.send("delegate the sum").returncode == 0  # the swarm goes on
