"""The built-in connectors' payload parsing and signature checks, as plain functions."""

from __future__ import annotations

import hashlib
import hmac
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from base_tools.connectors import cli, discord, github, slack, telegram, webhook
from base_tools.connectors._common import normalize_path


def test_cli_lines_follow_upstream() -> None:
    assert cli.normalize_line("hi\n", 3) == {
        "name": "stdin_message",
        "text": "hi",
        "instance_key": "cli:3",
        "properties": {},
    }
    assert cli.normalize_line("  \n", 0) is None
    assert cli.normalize_line("", 0, skip_empty=False) == {
        "name": "stdin_message",
        "text": "",
        "instance_key": "cli:0",
        "properties": {},
    }
    line = '{"name": "", "event": "e", "message": "m", "properties": {"a": 1}}'
    assert cli.normalize_line(line, 1, key_prefix="t") == {
        "name": "e",
        "text": "m",
        "instance_key": "t:1",
        "properties": {"a": "1"},
    }
    assert cli.normalize_line("[1, 2]", 2)["text"] == "[1, 2]"  # type: ignore[index]


def test_webhook_payloads_and_signatures() -> None:
    body = b'{"text": "x"}'
    digest = hmac.new(b"s", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert webhook.verify_signature(body, "1700000000", digest, "s")
    assert webhook.verify_signature(body, "1700000000", f"sha256={digest}", "s")
    assert not webhook.verify_signature(body, "1700000001", digest, "s")  # the time is signed
    assert not webhook.verify_signature(body, "1700000000", None, "s")
    assert not webhook.verify_signature(body, "1700000000", digest[:-1] + "0", "s")
    parsed = webhook.parse_payload(
        {"name": "n", "message": {"type": "image", "url": "https://x/a.png"}},
        default_event="d",
        default_key="k",
    )
    assert parsed["message"] == {"type": "image", "url": "https://x/a.png"}
    assert webhook.parse_payload({}, default_event="d", default_key="k") == {
        "name": "d",
        "instance_key": "k",
        "properties": {},
        "text": "",
    }


def test_telegram_updates() -> None:
    def update(**message: object) -> dict[str, object]:
        return {"update_id": 5, "message": {"chat": {"id": -100123}, "from": {"id": 1}, **message}}

    event = telegram.to_event(update(text="hi", message_id=9))
    assert event is not None and event["instance_key"] == "telegram:-100123"
    assert event["properties"] == {
        "update_id": "5",
        "chat_id": "-100123",
        "message_id": "9",
        "from_id": "1",
    }
    assert telegram.to_event(update()) is None  # a sticker, a join...: nothing to say
    assert (
        telegram.to_event(
            {"update_id": 6, "message": {"chat": {"id": 1}, "text": "x", "from": {"is_bot": True}}}
        )
        is None
    )
    assert telegram.to_event({"update_id": 7, "callback_query": {}}) is None
    doc = telegram.to_event(
        update(document={"file_id": "F", "mime_type": "image/png", "file_name": "a.png"})
    )
    assert doc is not None
    assert doc["text"] == "[telegram_image_document] file_id=F mime_type=image/png"
    assert doc["properties"]["document_file_name"] == "a.png"
    assert telegram.split_message("a" * 5000) == ["a" * 4096, "a" * 904]


def test_slack_signature_window_and_modes() -> None:
    body, now = b'{"type": "event_callback"}', time.time()

    def sig(ts: str) -> str:
        return (
            "v0=" + hmac.new(b"k", b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
        )

    ts = str(int(now))
    assert slack.verify_slack_signature(body, ts, sig(ts), "k", now)
    assert not slack.verify_slack_signature(body, ts, sig(ts), "k", now + 301)
    assert not slack.verify_slack_signature(body, "abc", sig("abc"), "k", now)
    assert not slack.verify_slack_signature(body, ts, None, "k", now)

    def message(**extra: object) -> dict[str, object]:
        return {
            "event": {
                "type": "message",
                "channel": "C1",
                "ts": "1.0",
                "text": "x",
                "channel_type": "channel",
                **extra,
            }
        }

    assert slack.to_event(message(), "all") is not None
    assert slack.to_event(message(), "mention") is None
    assert slack.to_event(message(), "channel_and_threads") is None
    assert slack.to_event(message(thread_ts="0.5"), "channel_and_threads") is not None
    assert slack.to_event(message(channel_type="im"), "channel_and_threads") is not None
    assert slack.to_event(message(subtype="message_deleted"), "all") is None
    assert slack.to_event(message(text=""), "all") is None
    assert slack.to_event({"event": {"type": "app_mention", "ts": "1"}}, "all") is None


def test_discord_interactions() -> None:
    key = Ed25519PrivateKey.generate()
    public = discord.load_public_key(
        key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    )
    body = b'{"type": 1}'
    assert discord.verify_discord_signature(public, body, key.sign(b"1" + body).hex(), "1")
    assert not discord.verify_discord_signature(public, body, key.sign(b"2" + body).hex(), "1")
    assert not discord.verify_discord_signature(public, body, "zz", "1")
    assert discord.to_event({"type": 1}) is None
    event = discord.to_event(
        {
            "type": 2,
            "id": "i",
            "data": {
                "name": "admin",
                "options": [
                    {"name": "user", "type": 1, "options": [{"name": "id", "type": 4, "value": 42}]}
                ],
            },
        }
    )
    assert event is not None
    assert event["text"] == "/admin user\nid: 42"
    assert event["instance_key"] == "discord:i"
    assert event["properties"]["option_id"] == "42"


def test_github_mapping_without_a_repository() -> None:
    event = github.to_event("workflow_run", {"action": "completed"})
    assert event == {
        "name": "github_workflow_run",
        "text": "workflow_run completed",
        "instance_key": "github:workflow_run",
        "properties": {"event": "workflow_run", "action": "completed"},
    }
    body = b"{}"
    good = "sha256=" + hmac.new(b"s", body, hashlib.sha256).hexdigest()
    assert github.verify_github_signature(body, good, "s")
    assert not github.verify_github_signature(body, good.removeprefix("sha256="), "s")


def test_paths_are_normalised() -> None:
    assert [normalize_path(p) for p in (None, "", "/", "hooks/", "/a/b//")] == [
        "/",
        "/",
        "/",
        "/hooks",
        "/a/b",
    ]
