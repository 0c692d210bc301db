"""The built-in `slack` connector: Slack's Events API requests over real HTTP, replies posted to a
local server that speaks Slack's Web API."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from typing import Any

import httpx
import pytest

from tests.fakes.fake_orchestrator import (
    FakeOrchestrator,
    free_port,
    wait_listening,
    write_bundle,
)
from tests.fakes.slack_server import FakeSlackServer

pytestmark = pytest.mark.timeout(30)

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-test-token"
CHANNEL = "C0123456789"

CONNECTION = """
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: slack-in
spec:
  connectorRef: {kind: Connector, name: slack, package: "@goondan/base"}
  config:
    SLACK_WEBHOOK_PORT: {valueFrom: {env: SLACK_PORT}}
    SLACK_WEBHOOK_PATH: {value: /slack/events}
    SLACK_API_BASE_URL: {valueFrom: {env: SLACK_API}}
    REPLY: {value: "true"}
  secrets:
    SLACK_SIGNING_SECRET: {valueFrom: {env: SLACK_SIGNING}}
    SLACK_BOT_TOKEN: {valueFrom: {env: SLACK_TOKEN}}
  ingress:
    rules:
      - match: {event: app_mention}
        route: {}
      - match: {event: message_im}
        route: {}
"""


def signed(body: bytes, *, at: float | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    ts = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": "v0=" + digest.hexdigest(),
        "Content-Type": "application/json",
    }


def callback(event: dict[str, Any], event_id: str) -> bytes:
    return json.dumps(
        {
            "type": "event_callback",
            "team_id": "T1",
            "event_id": event_id,
            "event": event,
            "authorizations": [{"user_id": "UBOT"}],
        }
    ).encode()


async def test_slack_events_signatures_bots_and_replies() -> None:
    slack_server = FakeSlackServer(token=BOT_TOKEN, channels=(CHANNEL, "D42"))
    async with FakeOrchestrator() as orch, slack_server as slack:
        port = free_port()
        write_bundle(orch.dir / "b", CONNECTION)
        proc = await orch.spawn(
            "slack-in",
            orch.dir / "b",
            {
                "SLACK_PORT": str(port),
                "SLACK_API": slack.base_url,
                "SLACK_SIGNING": SIGNING_SECRET,
                "SLACK_TOKEN": BOT_TOKEN,
            },
        )
        await orch.wait_ready("slack-in", proc)
        url = f"http://127.0.0.1:{port}/slack/events"
        await wait_listening(url, proc)
        async with httpx.AsyncClient(timeout=10) as client:

            async def post(body: bytes, headers: dict[str, str]) -> httpx.Response:
                return await client.post(url, content=body, headers=headers)

            challenge = json.dumps({"type": "url_verification", "challenge": "3eZbrw1a"}).encode()
            r = await post(challenge, signed(challenge))
            assert r.status_code == 200 and r.text == "3eZbrw1a"
            assert r.headers["content-type"].startswith("text/plain")

            mention = callback(
                {
                    "type": "app_mention",
                    "channel": CHANNEL,
                    "user": "U1",
                    "ts": "1700000000.000100",
                    "text": "<@UBOT> hello",
                },
                "Ev1",
            )
            assert (await post(mention, {})).status_code == 401
            stale = signed(mention, at=time.time() - 6 * 60)
            assert (await post(mention, stale)).status_code == 401
            wrong = signed(mention, secret="not-the-secret")
            assert (await post(mention, wrong)).status_code == 401
            tampered = mention.replace(b"hello", b"HELLO")
            assert (await post(tampered, signed(mention))).status_code == 401
            assert orch.events == []

            r = await post(mention, signed(mention))
            assert r.status_code == 200 and r.json() == {"ok": True}
            r = await post(mention, {**signed(mention), "X-Slack-Retry-Num": "1"})
            assert r.json()["ignored"] is True  # Slack's retry of an event already taken

            ignored = [
                {"type": "message", "channel": CHANNEL, "bot_id": "B1", "ts": "1.1", "text": "x"},
                {
                    "type": "message",
                    "channel": CHANNEL,
                    "subtype": "bot_message",
                    "ts": "1.2",
                    "text": "x",
                },
                {"type": "message", "channel": CHANNEL, "subtype": "message_changed", "ts": "1.3"},
                {
                    "type": "message",
                    "channel": CHANNEL,
                    "channel_type": "channel",
                    "user": "U1",
                    "ts": "1700000000.000100",
                    "text": "<@UBOT> hello",
                },  # also an app_mention
                {"type": "reaction_added", "user": "U1"},
            ]
            for i, event in enumerate(ignored):
                body = callback(event, f"Ign{i}")
                r = await post(body, signed(body))
                assert r.status_code == 200 and r.json() == {"ok": True, "ignored": True}

            reply_in_thread = callback(
                {
                    "type": "message",
                    "channel": "D42",
                    "channel_type": "im",
                    "user": "U2",
                    "ts": "1700000001.000200",
                    "thread_ts": "1700000000.000100",
                    "text": "more",
                    "files": [
                        {
                            "name": "a.png",
                            "mimetype": "image/png",
                            "url_private": "https://files.slack.com/a.png",
                        }
                    ],
                },
                "Ev2",
            )
            assert (await post(reply_in_thread, signed(reply_in_thread))).status_code == 200
            assert (await client.get(url)).status_code == 405
            assert (
                await client.post(f"http://127.0.0.1:{port}/x", content=b"{}")
            ).status_code == 404

        events = await orch.wait_events(2)
        mention_event, im_event = events
        assert mention_event.name == "app_mention"
        assert mention_event.instance_key == f"slack:{CHANNEL}:1700000000.000100"
        assert mention_event.properties == {
            "channel_id": CHANNEL,
            "ts": "1700000000.000100",
            "user_id": "U1",
            "team_id": "T1",
        }
        assert mention_event.message.text == "<@UBOT> hello"
        assert im_event.name == "message_im"
        assert im_event.instance_key == "slack:D42:1700000000.000100"
        assert im_event.message.text == "more\n[image] https://files.slack.com/a.png"
        assert im_event.properties["thread_ts"] == "1700000000.000100"

        for _ in range(100):  # the replies are posted in the background
            if len(slack.calls_of("chat.postMessage")) == 2:
                break
            await asyncio.sleep(0.05)
        posted = sorted(slack.calls_of("chat.postMessage"), key=lambda p: p["channel"])
        assert posted == [
            {"channel": CHANNEL, "text": "echo: <@UBOT> hello", "thread_ts": "1700000000.000100"},
            {
                "channel": "D42",
                "text": "echo: more\n[image] https://files.slack.com/a.png",
                "thread_ts": "1700000000.000100",
            },
        ]
        await orch.stop("slack-in", proc)
        logs = proc.logs()
        assert SIGNING_SECRET not in logs and BOT_TOKEN not in logs
