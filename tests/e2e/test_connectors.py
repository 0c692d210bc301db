"""Connectors through a real daemon: the webhook connector over real HTTP on 127.0.0.1."""

import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from agentproc.conversation import read_messages
from tests.e2e.conftest import REPO, wait_for

SECRET = "s3cret-value-for-tests"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(port: int, body: dict[str, Any], *, secret: str | None = SECRET, raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        timestamp = str(int(time.time()))
        signed = f"{timestamp}.{json.dumps(body)}".encode()
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        headers["X-Webhook-Timestamp"] = timestamp
        headers["X-Signature-256"] = f"sha256={digest}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/", data, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def webhook(start_daemon, tmp_path):
    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    port = free_port()
    main = bundle / "goondan.yaml"
    main.write_text(main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}'))
    daemon = start_daemon(bundle, env={"WEBHOOK_SECRET": SECRET})

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout=20)
    return daemon, port


def test_signed_request_gets_the_agent_reply(webhook):
    daemon, port = webhook
    status, body = post(port, {"text": "What is 19 plus 23?", "wait": True})
    assert status == 200, body
    assert body["reply"] == "19 plus 23 is 42." and body["agent"] == "responder"
    rows = {p["name"]: p for p in daemon.status()["processes"]}
    assert rows["http-in"]["kind"] == "connector" and rows["http-in"]["status"] == "idle"


def test_unsigned_and_tampered_requests_are_refused(webhook, state_root):
    daemon, port = webhook
    assert post(port, {"text": "hi"}, secret=None)[0] == 401
    tampered = json.dumps({"text": "other"}).encode()
    assert post(port, {"text": "hi"}, raw=tampered)[0] == 401
    assert post(port, {"text": "hi"}, secret="wrong")[0] == 401
    # nothing reached an agent
    assert not list(state_root.glob("swarms/*/instances/*/responder*"))


def test_ingress_rules_pick_the_conversation(webhook, state_root):
    daemon, port = webhook
    status, body = post(port, {"text": "hello", "properties": {"caller": "alice"}})
    assert len(body.pop("traceId")) == 32  # what `goondan logs --trace` finds its turn by
    assert status == 202 and body == {
        "accepted": True,
        "agent": "responder",
        "instanceKey": "http:alice",
    }
    convo = state_root / "swarms/default/instances/http:alice/responder"
    wait_for(lambda: "Webhook received: hello" in [m.content for m in read_messages(convo)])


def test_crashed_connector_is_respawned_and_serves_again(webhook):
    daemon, port = webhook
    old = daemon.process("http-in")["pid"]
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: daemon.process("http-in")["restarts"] == 1, timeout=10)

    def answers() -> bool:
        try:
            status: int = post(port, {"text": "What is 1 plus 1?", "wait": True})[0]
            return status == 200
        except OSError:
            return False

    wait_for(answers, timeout=20)
    assert daemon.process("http-in")["pid"] != old


def test_an_accepted_event_survives_a_connector_crash(webhook, state_root):
    daemon, port = webhook
    status, _ = post(port, {"text": "remember me", "properties": {"caller": "bob"}})
    assert status == 202
    os.kill(daemon.process("http-in")["pid"], signal.SIGKILL)  # right after the ack
    convo = state_root / "swarms/default/instances/http:bob/responder"
    wait_for(lambda: "Webhook received: remember me" in [m.content for m in read_messages(convo)])


def test_secrets_never_reach_the_logs(webhook):
    daemon, port = webhook
    post(port, {"text": "What is 2 plus 2?", "wait": True})
    post(port, {"text": "x"}, secret="wrong")
    assert SECRET not in daemon.logs()


def test_events_no_rule_accepts_are_refused_and_logged(start_daemon, tmp_path):
    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    port = free_port()
    main = bundle / "goondan.yaml"
    text = main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}')
    text = text.replace("      - route: {}\n", "").replace(
        "match: {event: webhook_message}",
        "match: {event: webhook_message, properties: {caller: vip}}",
    )
    main.write_text(text)
    daemon = start_daemon(bundle, env={"WEBHOOK_SECRET": SECRET})
    wait_for(lambda: daemon.process("http-in")["status"] == "idle", timeout=20)
    status, body = post(port, {"text": "hi", "properties": {"caller": "nobody"}})
    assert status == 422 and body["error"]["code"] == "E_NO_ROUTE", daemon.logs()
    assert "event matched no ingress rule; refused" in daemon.logs()
    assert post(port, {"text": "hi", "properties": {"caller": "vip"}})[0] == 202


def test_cli_connector_reads_the_daemons_stdin(tmp_path, state_root):
    import subprocess

    from tests.e2e.conftest import GOONDAN, QUICKSTART

    bundle = tmp_path / "cli"
    shutil.copytree(QUICKSTART, bundle)
    with open(bundle / "goondan.yaml", "a") as f:
        f.write(
            "---\napiVersion: goondan.ai/v1\nkind: Connection\nmetadata: {name: terminal}\n"
            'spec:\n  connectorRef: {kind: Connector, name: cli, package: "@goondan/base"}\n'
            '  config: {REPLY: {value: "true"}}\n'
            "  ingress:\n    rules:\n      - route: {instanceKey: local}\n"
        )
    stderr = open(state_root / "stderr", "w")  # noqa: SIM115 - closed in finally
    daemon = subprocess.Popen(
        [*GOONDAN, "run", str(bundle), "--state-root", str(state_root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    assert daemon.stdin is not None and daemon.stdout is not None
    try:
        daemon.stdin.write("What is 2 plus 3?\nWhat is 4 plus 4?\n")
        daemon.stdin.close()
        first, second = daemon.stdout.readline(), daemon.stdout.readline()
        assert first.startswith("2 plus 3 is 5") and second.startswith("4 plus 4 is 8")
        convo = read_messages(state_root / "swarms/default/instances/local/assistant")
        assert [m.content for m in convo if m.role == "user"] == [  # one conversation, as routed
            "What is 2 plus 3?",
            "What is 4 plus 4?",
        ]
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(20) == 0, (state_root / "stderr").read_text()
        daemon.stdout.close()
        stderr.close()


def test_a_connection_tool_policy_applies_to_its_turns(start_daemon, tmp_path, state_root):
    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    port = free_port()
    main = bundle / "goondan.yaml"
    text = main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}')
    text = text.replace("  ingress:\n", '  toolPolicy: {deny: ["calc__*"]}\n  ingress:\n')
    main.write_text(text)
    daemon = start_daemon(bundle, env={"WEBHOOK_SECRET": SECRET})
    wait_for(lambda: daemon.process("http-in")["status"] == "idle", timeout=20)
    status, body = post(port, {"text": "What is 1 plus 2?", "wait": True})
    assert status == 200
    tool_results = [
        json.loads(m.content or "")
        for m in read_messages(state_root / "swarms/default/instances/webhook:default/responder")
        if m.role == "tool"
    ]
    [denied] = tool_results
    assert denied["status"] == "error"
    assert denied["error"]["code"] in ("E_TOOL_POLICY_DENIED", "E_TOOL_NOT_IN_CATALOG")
    # the same agent reached through the CLI has its tools
    assert daemon.send("What is 1 plus 2?").stdout.strip() == "1 plus 2 is 3."
