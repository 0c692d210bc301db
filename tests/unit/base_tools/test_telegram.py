"""telegram: every export against a local Bot API server that answers like the real one."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from base_tools.telegram import handlers
from goondan import ToolContext, ToolError
from tests.fakes.telegram_server import FakeTelegramServer

CHAT = "42"


@pytest.fixture
async def tg(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegramServer]:
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", "127.0.0.1")  # the fake lives on loopback
    async with FakeTelegramServer() as server:
        yield server


def base(tg: FakeTelegramServer, **args: object) -> dict[str, Any]:
    return {"token": tg.token, "apiBaseUrl": tg.base_url, **args}


async def test_send(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    out = await handlers["send"](
        ctx,
        base(
            tg,
            chatId=42,
            text="Hello!",
            parseMode="markdown-v2",
            disableNotification=True,
            disableWebPagePreview=True,
        ),
    )
    assert out == {
        "ok": True,
        "chatId": CHAT,
        "messageId": out["messageId"],
        "date": out["date"],
        "text": "Hello!",
    }
    assert isinstance(out["messageId"], int) and isinstance(out["date"], int)
    assert tg.calls_of("sendMessage") == [
        {
            "chat_id": CHAT,
            "text": "Hello!",
            "parse_mode": "MarkdownV2",
            "disable_notification": True,
            "disable_web_page_preview": True,
        }
    ]


@pytest.mark.parametrize(
    "alias, mode",
    [
        ("HTML", "HTML"),
        ("html", "HTML"),
        ("Markdown", "Markdown"),
        ("markdown_v2", "MarkdownV2"),
        ("MarkdownV2", "MarkdownV2"),
    ],
)
async def test_parse_mode_aliases(
    ctx: ToolContext, tg: FakeTelegramServer, alias: str, mode: str
) -> None:
    await handlers["send"](ctx, base(tg, chatId=CHAT, text="x", parseMode=alias))
    assert tg.calls_of("sendMessage")[-1]["parse_mode"] == mode


async def test_reply_to(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    first = tg.seed_chat_message(CHAT, "question")
    await handlers["send"](ctx, base(tg, chatId=CHAT, text="answer", replyToMessageId=first))
    with pytest.raises(ToolError) as info:
        await handlers["send"](ctx, base(tg, chatId=CHAT, text="answer", replyToMessageId=999))
    assert str(info.value) == (
        "[telegram] sendMessage failed (code 400): Bad Request: message to be replied not found"
    )
    out = await handlers["send"](
        ctx,
        base(tg, chatId=CHAT, text="answer", replyToMessageId=999, allowSendingWithoutReply=True),
    )
    assert out["ok"] is True


async def test_edit(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    message = tg.seed_chat_message(CHAT, "draft")
    out = await handlers["edit"](
        ctx, base(tg, chatId=CHAT, messageId=message, text="final", parseMode="HTML")
    )
    assert out == {"ok": True, "chatId": CHAT, "messageId": message, "edited": True}
    assert tg.messages[(CHAT, message)]["text"] == "final"
    with pytest.raises(ToolError) as info:
        await handlers["edit"](ctx, base(tg, chatId=CHAT, messageId=message, text="final"))
    assert "editMessageText failed (code 400): Bad Request: message is not modified" in str(
        info.value
    )


async def test_delete(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    message = tg.seed_chat_message(CHAT, "oops")
    assert await handlers["delete"](ctx, base(tg, chatId=CHAT, messageId=message)) == {
        "ok": True,
        "chatId": CHAT,
        "messageId": message,
        "deleted": True,
    }
    with pytest.raises(ToolError) as info:
        await handlers["delete"](ctx, base(tg, chatId=CHAT, messageId=message))
    assert info.value.code == "E_TELEGRAM_API"
    assert str(info.value).endswith(
        "deleteMessage failed (code 400): Bad Request: message to delete not found"
    )


async def test_react_set_and_clear(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    message = tg.seed_chat_message(CHAT, "nice")
    out = await handlers["react"](
        ctx, base(tg, chatId=CHAT, messageId=message, emoji="👍", emojis=["🔥", "👍"], isBig=True)
    )
    assert out == {
        "ok": True,
        "chatId": CHAT,
        "messageId": message,
        "cleared": False,
        "emojis": ["👍", "🔥"],
        "reactionCount": 2,
    }
    assert tg.calls_of("setMessageReaction")[-1]["is_big"] is True
    cleared = await handlers["react"](ctx, base(tg, chatId=CHAT, messageId=message, clear=True))
    assert (cleared["cleared"], cleared["emojis"], cleared["reactionCount"]) == (True, [], 0)
    assert tg.reactions[(CHAT, message)] == []


async def test_react_errors(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    message = tg.seed_chat_message(CHAT, "nice")
    with pytest.raises(ToolError) as none:
        await handlers["react"](ctx, base(tg, chatId=CHAT, messageId=message))
    assert none.value.code == "E_TOOL_INVALID_ARGS" and "clear=true" in str(none.value)
    assert tg.calls_of("setMessageReaction") == []
    with pytest.raises(ToolError) as invalid:
        await handlers["react"](ctx, base(tg, chatId=CHAT, messageId=message, emoji="🦄"))
    assert str(invalid.value).endswith("(code 400): Bad Request: REACTION_INVALID")


@pytest.mark.parametrize(
    "args, action",
    [
        ({}, "typing"),
        ({"action": "upload-photo"}, "upload_photo"),
        ({"status": "record_video_note"}, "record_video_note"),
        ({"action": "Upload Document"}, "upload_document"),
    ],
)
async def test_set_chat_action(
    ctx: ToolContext, tg: FakeTelegramServer, args: dict[str, Any], action: str
) -> None:
    out = await handlers["setChatAction"](ctx, base(tg, chatId=CHAT, **args))
    assert out == {"ok": True, "chatId": CHAT, "status": action, "action": action}
    assert tg.actions[-1] == (CHAT, action)


async def test_download_file(ctx: ToolContext, tg: FakeTelegramServer, workdir: Path) -> None:
    data = b"\x89PNG fake image"
    tg.add_file("FILE1", "photos/file_0.png", data, "image/png")
    out = await handlers["downloadFile"](ctx, base(tg, fileId="FILE1", savePath="in/pic.png"))
    encoded = base64.b64encode(data).decode()
    assert out == {
        "ok": True,
        "fileId": "FILE1",
        "fileUniqueId": "u-FILE1",
        "filePath": "photos/file_0.png",
        "fileSize": len(data),
        "downloadUrl": f"{tg.base_url}/file/bot<token>/photos/file_0.png",
        "contentType": "image/png",
        "sizeBytes": len(data),
        "savedPath": str(workdir.resolve() / "in" / "pic.png"),
        "base64": encoded,
        "dataUrl": f"data:image/png;base64,{encoded}",
    }
    assert (workdir / "in" / "pic.png").read_bytes() == data
    assert tg.token not in str(out)


async def test_download_file_options_and_limits(
    ctx: ToolContext, tg: FakeTelegramServer, outside: Path
) -> None:
    tg.add_file("DOC", "documents/report.pdf", b"%PDF-1.4" + b"0" * 100)
    slim = await handlers["downloadFile"](
        ctx, base(tg, file_id="DOC", includeBase64=False, includeDataUrl=False)
    )
    assert (slim["base64"], slim["dataUrl"], slim["savedPath"]) == (None, None, None)
    assert slim["contentType"] == "application/pdf"  # guessed from the path
    with pytest.raises(ToolError) as big:
        await handlers["downloadFile"](ctx, base(tg, fileId="DOC", maxBytes=10))
    assert big.value.code == "E_FILE_TOO_LARGE"
    with pytest.raises(ToolError) as escape:
        await handlers["downloadFile"](
            ctx, base(tg, fileId="DOC", outputPath=str(outside / "x.pdf"))
        )
    assert escape.value.code == "E_PATH_OUTSIDE_WORKDIR"
    assert not (outside / "x.pdf").exists()
    with pytest.raises(ToolError) as unknown:
        await handlers["downloadFile"](ctx, base(tg, fileId="NOPE"))
    assert str(unknown.value) == (
        "[telegram] getFile failed (code 400): Bad Request: invalid file_id"
    )
    with pytest.raises(ToolError) as missing:
        await handlers["downloadFile"](ctx, base(tg))
    assert missing.value.code == "E_TOOL_INVALID_ARGS"


async def test_api_errors_name_method_and_description(
    ctx: ToolContext, tg: FakeTelegramServer
) -> None:
    with pytest.raises(ToolError) as info:
        await handlers["send"](ctx, base(tg, chatId="777", text="hi"))
    assert str(info.value) == (
        "[telegram] sendMessage failed (code 400): Bad Request: chat not found"
    )
    assert info.value.code == "E_TELEGRAM_API" and info.value.suggestion


async def test_wrong_token_is_unauthorized_and_not_leaked(
    ctx: ToolContext, tg: FakeTelegramServer
) -> None:
    with pytest.raises(ToolError) as info:
        await handlers["send"](
            ctx,
            {"token": "999:wrong-secret", "apiBaseUrl": tg.base_url, "chatId": CHAT, "text": "hi"},
        )
    assert str(info.value) == "[telegram] sendMessage failed (code 401): Unauthorized"
    assert "wrong-secret" not in str(info.value) + str(info.value.suggestion)


async def test_non_json_error_body(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    tg.queue_raw("sendMessage", 502, "<html>Bad Gateway</html>")
    with pytest.raises(ToolError) as info:
        await handlers["send"](ctx, base(tg, chatId=CHAT, text="hi"))
    assert str(info.value) == "[telegram] sendMessage failed (code 502): HTTP 502 Bad Gateway"


async def test_short_429_is_waited_out(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    tg.rate_limit("sendMessage", retry_after=1)
    started = time.monotonic()
    out = await handlers["send"](ctx, base(tg, chatId=CHAT, text="hi"))
    assert out["ok"] is True and time.monotonic() - started >= 1
    assert len(tg.calls_of("sendMessage")) == 2


async def test_long_429_is_an_error_with_the_wait(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    tg.rate_limit("sendMessage", retry_after=30)
    with pytest.raises(ToolError) as info:
        await handlers["send"](ctx, base(tg, chatId=CHAT, text="hi"))
    assert info.value.code == "E_RATE_LIMITED"
    assert str(info.value) == (
        "[telegram] sendMessage failed (code 429): Too Many Requests: retry after 30"
    )
    assert "wait 30 seconds" in (info.value.suggestion or "")
    assert len(tg.calls_of("sendMessage")) == 1


async def test_token_from_environment(
    ctx: ToolContext, tg: FakeTelegramServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOT_TOKEN", tg.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", tg.base_url + "/")
    out = await handlers["send"](ctx, {"chatId": CHAT, "text": "from env"})
    assert out["text"] == "from env"


async def test_env_token_is_not_sent_to_a_call_chosen_base_url(
    ctx: ToolContext, tg: FakeTelegramServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    with pytest.raises(ToolError) as info:
        await handlers["send"](ctx, {"chatId": CHAT, "text": "x", "apiBaseUrl": tg.base_url})
    assert info.value.code == "E_TOKEN_SCOPE"
    assert tg.calls == []


@pytest.mark.parametrize(
    "args, code",
    [
        ({"chatId": CHAT, "text": "x"}, "E_TOKEN_MISSING"),
        ({"chatId": CHAT, "text": "x", "token": "t", "parseMode": "rtf"}, "E_TOOL_INVALID_ARGS"),
        ({"chatId": " ", "text": "x", "token": "t"}, "E_TOOL_INVALID_ARGS"),
        (
            {"chatId": CHAT, "text": "x", "token": "t", "apiBaseUrl": "ftp://x"},
            "E_TOOL_INVALID_ARGS",
        ),
    ],
)
async def test_argument_errors_before_any_request(
    ctx: ToolContext, args: dict[str, Any], code: str
) -> None:
    with pytest.raises(ToolError) as info:
        await handlers["send"](ctx, args)
    assert info.value.code == code


async def test_unsupported_chat_action(ctx: ToolContext, tg: FakeTelegramServer) -> None:
    with pytest.raises(ToolError) as info:
        await handlers["setChatAction"](ctx, base(tg, chatId=CHAT, action="dancing"))
    assert "Unsupported chat action 'dancing'" in str(info.value)
    assert tg.calls == []


async def test_an_internal_api_base_url_meets_the_address_guard(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """apiBaseUrl pointing at an internal address is refused like any other request."""
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", "")
    with pytest.raises(ToolError) as info:
        await handlers["send"](
            ctx, {"token": "t", "apiBaseUrl": "http://127.0.0.1:9", "chatId": CHAT, "text": "x"}
        )
    assert info.value.code == "E_HTTP_BLOCKED"
