"""The built-in `telegram` connector against a local server that behaves like the Bot API."""

from __future__ import annotations

import asyncio

import pytest

from tests.fakes.fake_orchestrator import FakeOrchestrator, write_bundle
from tests.fakes.telegram_server import FakeTelegramServer

pytestmark = pytest.mark.timeout(30)

TOKEN = "123456:AAH-secret-bot-token-xyz"

CONNECTION = """
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: tg
spec:
  connectorRef: {kind: Connector, name: telegram-polling, package: "@goondan/base"}
  config:
    TELEGRAM_API_BASE_URL: {valueFrom: {env: TG_API}}
    TELEGRAM_POLL_TIMEOUT_SECONDS: {value: "1"}
    TELEGRAM_RETRY_DELAY_MS: {value: "100"}
    REPLY: {value: "true"}
  secrets:
    TELEGRAM_BOT_TOKEN: {valueFrom: {env: TG_TOKEN}}
  ingress:
    rules:
      - match: {event: telegram_message}
        route: {}
"""


async def test_telegram_offsets_429_backoff_bots_ignored_and_replies_posted() -> None:
    async with FakeOrchestrator() as orch, FakeTelegramServer(token=TOKEN) as api:
        api.rate_limit("getUpdates", retry_after=1)
        hello = api.push_update_message(42, "hello")
        api.push_update_message(42, "I am a bot", is_bot=True)
        photo = api.push_update_message(
            43,
            None,
            caption="look",
            photo=[
                {"file_id": "small", "width": 90, "height": 90},
                {"file_id": "big", "width": 800, "height": 600},
            ],
        )
        edited = api.push_update(edited_message={"message_id": 1, "chat": {"id": 42}})
        write_bundle(orch.dir / "b", CONNECTION)
        proc = await orch.spawn("tg", orch.dir / "b", {"TG_API": api.base_url, "TG_TOKEN": TOKEN})
        await orch.wait_ready("tg", proc)

        first, second = await orch.wait_events(2, proc=proc)
        assert first.name == "telegram_message" and first.message.text == "hello"
        assert first.instance_key == "telegram:42" and first.reply
        assert first.properties == {
            "update_id": str(hello),
            "chat_id": "42",
            "chat_type": "private",
            "chat_username": "alice",
            "message_id": "1",
            "date": "1700000000",
            "from_id": "7",
            "from_username": "alice",
            "from_first_name": "Alice",
        }
        assert second.instance_key == "telegram:43"
        assert second.message.text == "look\n[telegram_photo] file_id=big"
        assert second.properties["has_photo"] == "true"
        assert second.properties["photo_file_id"] == "big"
        assert second.properties["update_id"] == str(photo)

        later = api.push_update_message(42, "again")  # arrives while the connector long-polls
        assert (await orch.wait_events(3, proc=proc))[2].message.text == "again"
        for _ in range(100):
            if len(api.calls_of("sendMessage")) == 3:
                break
            await asyncio.sleep(0.05)
        sent = sorted(api.calls_of("sendMessage"), key=lambda p: p["text"])
        assert [(p["chat_id"], p["text"]) for p in sent] == [
            ("42", "echo: again"),
            ("42", "echo: hello"),
            ("43", "echo: look\n[telegram_photo] file_id=big"),
        ]
        assert sent[1]["reply_parameters"]["message_id"] == 1

        calls = api.calls_of("getUpdates")
        times = api.times_of("getUpdates")
        assert times[1] - times[0] >= 1, "429 retry_after not honoured"
        assert "offset" not in calls[0] and "offset" not in calls[1]
        offsets: list[int] = [c["offset"] for c in calls[2:]]
        assert edited + 1 in offsets and later + 1 in offsets  # every update confirmed
        assert offsets == sorted(offsets)
        assert all(c["timeout"] == 1 for c in calls)

        await orch.stop("tg", proc)
        assert TOKEN not in proc.logs()


async def test_telegram_confirms_the_last_batch_when_stopping() -> None:
    async with FakeOrchestrator() as orch, FakeTelegramServer(token=TOKEN) as api:
        write_bundle(orch.dir / "b", CONNECTION.replace('value: "true"', 'value: "false"'))
        orch.ack_delay_s = 0.5  # the stop arrives while the event waits for its ack
        proc = await orch.spawn("tg", orch.dir / "b", {"TG_API": api.base_url, "TG_TOKEN": TOKEN})
        await orch.wait_ready("tg", proc)
        update = api.push_update_message(42, "last words")
        await orch.wait_events(1, proc=proc)
        await orch.stop("tg", proc)
        last = api.calls_of("getUpdates")[-1]
        assert last["offset"] == update + 1 and last["timeout"] == 0
        assert api.updates == []  # confirmed: a restart will not see it again


async def test_telegram_rejected_or_missing_token_is_a_start_error() -> None:
    async with FakeOrchestrator() as orch, FakeTelegramServer(token=TOKEN) as api:
        write_bundle(orch.dir / "b", CONNECTION)
        proc = await orch.spawn(
            "tg", orch.dir / "b", {"TG_API": api.base_url, "TG_TOKEN": "999:wrong-token-value"}
        )
        error = await orch.wait_start_error("tg")
        assert await proc.wait() == 3
        assert "rejected the token" in error.message
        assert "wrong-token-value" not in proc.logs()

        orch.start_errors.clear()
        proc = await orch.spawn("tg", orch.dir / "b", {"TG_API": api.base_url, "TG_TOKEN": " "})
        error = await orch.wait_start_error("tg")
        assert await proc.wait() == 3
        assert "TELEGRAM_BOT_TOKEN" in error.message
