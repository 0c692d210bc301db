"""slack: every export against a local Web API server that answers like the real one."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from base_tools.slack import handlers
from goondan import ToolContext, ToolError
from tests.fakes.slack_server import FakeSlackServer

CHANNEL = "C0123456789"


@pytest.fixture
async def slack(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeSlackServer]:
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", "127.0.0.1")  # the fake lives on loopback
    async with FakeSlackServer() as server:
        yield server


def base(slack: FakeSlackServer, **args: object) -> dict[str, Any]:
    return {"token": slack.token, "apiBaseUrl": slack.base_url, **args}


async def test_send(ctx: ToolContext, slack: FakeSlackServer) -> None:
    out = await handlers["send"](
        ctx,
        base(
            slack,
            channelId=CHANNEL,
            text="Hello!",
            mrkdwn=True,
            unfurlLinks=False,
            unfurlMedia=False,
        ),
    )
    assert out == {
        "ok": True,
        "channelId": CHANNEL,
        "messageTs": out["messageTs"],
        "text": "Hello!",
    }
    assert slack.calls_of("chat.postMessage") == [
        {
            "channel": CHANNEL,
            "text": "Hello!",
            "mrkdwn": True,
            "unfurl_links": False,
            "unfurl_media": False,
        }
    ]
    assert slack.content_types == ["application/json"]


async def test_send_in_thread_with_channel_alias(ctx: ToolContext, slack: FakeSlackServer) -> None:
    parent = slack.add_message(CHANNEL, "parent")
    out = await handlers["send"](
        ctx, base(slack, channel=CHANNEL, text="reply", threadTs=parent, replyBroadcast=True)
    )
    assert out["channelId"] == CHANNEL
    sent = slack.calls_of("chat.postMessage")[-1]
    assert (sent["thread_ts"], sent["reply_broadcast"]) == (parent, True)


async def test_read_history_and_pages(ctx: ToolContext, slack: FakeSlackServer) -> None:
    stamps = [slack.add_message(CHANNEL, f"m{i}") for i in range(3)]
    out = await handlers["read"](ctx, base(slack, channelId=CHANNEL, limit=2))
    assert (out["ok"], out["method"], out["count"], out["hasMore"]) == (
        True,
        "conversations.history",
        2,
        True,
    )
    assert [m["text"] for m in out["messages"]] == ["m2", "m1"]
    assert (out["messageTs"], out["threadTs"], out["found"]) == (None, None, None)
    rest = await handlers["read"](
        ctx, base(slack, channelId=CHANNEL, limit=2, cursor=out["nextCursor"])
    )
    assert [m["ts"] for m in rest["messages"]] == [stamps[0]]
    assert (rest["hasMore"], rest["nextCursor"]) == (False, None)
    assert slack.content_types[-1] == "application/x-www-form-urlencoded"


async def test_read_one_message_and_a_thread(ctx: ToolContext, slack: FakeSlackServer) -> None:
    first = slack.add_message(CHANNEL, "first")
    slack.add_message(CHANNEL, "second")
    slack.add_message(CHANNEL, "in thread", thread_ts=first)
    one = await handlers["read"](ctx, base(slack, channelId=CHANNEL, ts=first))
    assert one["found"]["text"] == "first" and one["messageTs"] == first and one["count"] == 1
    sent = slack.calls_of("conversations.history")[-1]
    assert (sent["latest"], sent["inclusive"], sent["limit"]) == (first, "true", "1")
    thread = await handlers["read"](ctx, base(slack, channelId=CHANNEL, threadTs=first))
    assert thread["method"] == "conversations.replies" and thread["threadTs"] == first
    assert [m["text"] for m in thread["messages"]] == ["first", "in thread"]


async def test_edit_delete(ctx: ToolContext, slack: FakeSlackServer) -> None:
    ts = slack.add_message(CHANNEL, "draft")
    assert await handlers["edit"](
        ctx, base(slack, channelId=CHANNEL, messageTs=ts, text="final")
    ) == {"ok": True, "channelId": CHANNEL, "messageTs": ts, "edited": True}
    assert slack.channels[CHANNEL][0]["text"] == "final"
    assert await handlers["delete"](ctx, base(slack, channel=CHANNEL, timestamp=ts)) == {
        "ok": True,
        "channelId": CHANNEL,
        "messageTs": ts,
        "deleted": True,
    }
    for export, extra in (("edit", {"text": "again"}), ("delete", {})):
        with pytest.raises(ToolError) as info:
            await handlers[export](ctx, base(slack, channelId=CHANNEL, messageTs=ts, **extra))
        method = "chat.update" if export == "edit" else "chat.delete"
        assert str(info.value) == f"[slack] {method} failed: message_not_found"
        assert info.value.code == "E_SLACK_API"


async def test_react(ctx: ToolContext, slack: FakeSlackServer) -> None:
    ts = slack.add_message(CHANNEL, "nice")
    out = await handlers["react"](
        ctx,
        base(
            slack, channelId=CHANNEL, messageTs=ts, emoji=":thumbsup:", emojis=["wave", "thumbsup"]
        ),
    )
    assert out == {
        "ok": True,
        "channelId": CHANNEL,
        "messageTs": ts,
        "emojis": ["thumbsup", "wave"],
        "reactionCount": 2,
    }
    assert slack.reactions[(CHANNEL, ts)] == ["thumbsup", "wave"]
    with pytest.raises(ToolError) as again:
        await handlers["react"](ctx, base(slack, channelId=CHANNEL, messageTs=ts, emoji="wave"))
    assert str(again.value) == "[slack] reactions.add failed: already_reacted"


@pytest.mark.parametrize("args", [{}, {"emoji": "  "}, {"emoji": "two words"}])
async def test_react_needs_a_valid_emoji(
    ctx: ToolContext, slack: FakeSlackServer, args: dict[str, Any]
) -> None:
    with pytest.raises(ToolError) as info:
        await handlers["react"](ctx, base(slack, channelId=CHANNEL, messageTs="1.0", **args))
    assert info.value.code == "E_TOOL_INVALID_ARGS"
    assert slack.calls == []


async def test_download_file(ctx: ToolContext, slack: FakeSlackServer, workdir: Path) -> None:
    data = b"\x89PNG image bytes"
    url = slack.add_file("image.png", data, "image/png")
    out = await handlers["downloadFile"](ctx, base(slack, fileUrl=url, savePath="img.png"))
    encoded = base64.b64encode(data).decode()
    assert out == {
        "ok": True,
        "url": url,
        "contentType": "image/png",
        "contentLength": len(data),
        "sizeBytes": len(data),
        "etag": '"etag-1"',
        "contentDisposition": 'attachment; filename="image.png"',
        "savedPath": str(workdir.resolve() / "img.png"),
        "base64": encoded,
        "dataUrl": f"data:image/png;base64,{encoded}",
    }
    assert slack.file_requests == [f"Bearer {slack.token}"]
    assert (workdir / "img.png").read_bytes() == data


async def test_download_file_errors(ctx: ToolContext, slack: FakeSlackServer) -> None:
    url = slack.add_file("big.bin", b"0" * 1000, "application/octet-stream")
    with pytest.raises(ToolError) as big:
        await handlers["downloadFile"](ctx, base(slack, url=url, maxBytes=10))
    assert big.value.code == "E_FILE_TOO_LARGE"
    with pytest.raises(ToolError) as missing:
        await handlers["downloadFile"](ctx, base(slack, url=slack.file_url("nope.bin")))
    assert missing.value.code == "E_DOWNLOAD_FAILED" and "HTTP 404" in str(missing.value)
    with pytest.raises(ToolError) as html:
        await handlers["downloadFile"](
            ctx, {"token": "xoxb-wrong", "apiBaseUrl": slack.base_url, "url": url}
        )
    assert html.value.code == "E_DOWNLOAD_FAILED" and "files:read" in str(html.value)
    with pytest.raises(ToolError) as no_url:
        await handlers["downloadFile"](ctx, base(slack))
    assert no_url.value.code == "E_TOOL_INVALID_ARGS"


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/steal",
        "http://files.slack.com/x",
        "https://slack.com.evil.example/x",
        "ftp://files.slack.com/x",
    ],
)
async def test_download_sends_the_token_only_to_slack(
    ctx: ToolContext, slack: FakeSlackServer, url: str
) -> None:
    with pytest.raises(ToolError) as info:
        await handlers["downloadFile"](ctx, base(slack, downloadUrl=url))
    assert info.value.code == "E_TOOL_INVALID_ARGS"
    assert slack.file_requests == []


async def test_api_errors_name_method_and_error(ctx: ToolContext, slack: FakeSlackServer) -> None:
    with pytest.raises(ToolError) as info:
        await handlers["send"](ctx, base(slack, channelId="CNOPE", text="hi"))
    assert str(info.value) == "[slack] chat.postMessage failed: channel_not_found"
    assert "channelId" in (info.value.suggestion or "")
    slack.fail("chat.postMessage", "missing_scope", needed="chat:write", provided="channels:read")
    with pytest.raises(ToolError) as scope:
        await handlers["send"](ctx, base(slack, channelId=CHANNEL, text="hi"))
    assert str(scope.value) == (
        "[slack] chat.postMessage failed: missing_scope (needed scope: chat:write)"
    )


async def test_wrong_token(ctx: ToolContext, slack: FakeSlackServer) -> None:
    with pytest.raises(ToolError) as info:
        await handlers["send"](
            ctx,
            {
                "token": "xoxb-wrong",
                "apiBaseUrl": slack.base_url,
                "channelId": CHANNEL,
                "text": "hi",
            },
        )
    assert str(info.value) == "[slack] chat.postMessage failed: invalid_auth"


async def test_short_429_is_waited_out(ctx: ToolContext, slack: FakeSlackServer) -> None:
    slack.rate_limit("chat.postMessage", retry_after=1)
    started = time.monotonic()
    out = await handlers["send"](ctx, base(slack, channelId=CHANNEL, text="hi"))
    assert out["ok"] is True and time.monotonic() - started >= 1
    assert len(slack.calls_of("chat.postMessage")) == 2


async def test_long_429_is_an_error_with_the_wait(ctx: ToolContext, slack: FakeSlackServer) -> None:
    slack.rate_limit("conversations.history", retry_after=120)
    with pytest.raises(ToolError) as info:
        await handlers["read"](ctx, base(slack, channelId=CHANNEL))
    assert info.value.code == "E_RATE_LIMITED"
    assert str(info.value) == (
        "[slack] conversations.history failed: ratelimited (retry after 120 s)"
    )
    assert "wait 120 seconds" in (info.value.suggestion or "")


async def test_token_and_base_url_from_environment(
    ctx: ToolContext, slack: FakeSlackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_TOKEN", slack.token)
    monkeypatch.setenv("SLACK_API_BASE_URL", slack.base_url)
    out = await handlers["send"](ctx, {"channelId": CHANNEL, "text": "env"})
    assert out["ok"] is True
    with pytest.raises(ToolError) as scope:
        await handlers["send"](
            ctx, {"channelId": CHANNEL, "text": "env", "apiBaseUrl": "https://attacker.example/api"}
        )
    assert scope.value.code == "E_TOKEN_SCOPE"


@pytest.mark.parametrize(
    "export, args, code",
    [
        ("send", {"channelId": CHANNEL, "text": "x"}, "E_TOKEN_MISSING"),
        ("send", {"token": "t", "text": "x"}, "E_TOOL_INVALID_ARGS"),
        ("edit", {"token": "t", "channelId": CHANNEL, "text": "x"}, "E_TOOL_INVALID_ARGS"),
        ("read", {"token": "t", "channelId": CHANNEL, "limit": 0}, "E_TOOL_INVALID_ARGS"),
    ],
)
async def test_argument_errors_before_any_request(
    ctx: ToolContext, export: str, args: dict[str, Any], code: str
) -> None:
    with pytest.raises(ToolError) as info:
        await handlers[export](ctx, args)
    assert info.value.code == code
