"""`telegram` tool of @goondan/base: the Telegram Bot API for an agent.

Token: the call's `token`, else TELEGRAM_BOT_TOKEN, BOT_TOKEN, TELEGRAM_TOKEN or
BRAIN_TELEGRAM_BOT_TOKEN. Base URL: the call's `apiBaseUrl`, else TELEGRAM_API_BASE_URL, else
https://api.telegram.org (an env token only goes to the configured one; see `_botapi.py`).
An API error becomes `[telegram] <method> failed (code N): <description>`. The token never
appears in an output or an error: `downloadUrl` shows it as `<token>`.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from base_tools import _botapi
from base_tools._botapi import Answer, Service, Target
from goondan import ErrorCode, ToolContext, ToolError

SERVICE = Service(
    name="telegram",
    token_envs=("TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN", "BRAIN_TELEGRAM_BOT_TOKEN"),
    base_url_env="TELEGRAM_API_BASE_URL",
    default_base_url="https://api.telegram.org",
)

PARSE_MODES = {
    "markdown": "Markdown",
    "markdownv2": "MarkdownV2",
    "markdown-v2": "MarkdownV2",
    "html": "HTML",
}
CHAT_ACTIONS = (
    "typing",
    "upload-photo",
    "record-video",
    "upload-video",
    "record-voice",
    "upload-voice",
    "upload-document",
    "choose-sticker",
    "find-location",
    "record-video-note",
    "upload-video-note",
)


async def send(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    chat_id = _chat_id(args)
    payload = _compact(
        {
            "chat_id": chat_id,
            "text": args["text"],
            "parse_mode": _parse_mode(args),
            "disable_notification": args.get("disableNotification"),
            "disable_web_page_preview": args.get("disableWebPagePreview"),
            "reply_to_message_id": args.get("replyToMessageId"),
            "allow_sending_without_reply": args.get("allowSendingWithoutReply"),
        }
    )
    result = await _call("sendMessage", args, payload)
    message = result if isinstance(result, dict) else {}
    return {
        "ok": True,
        "chatId": chat_id,
        "messageId": message.get("message_id"),
        "date": message.get("date"),
        "text": message.get("text"),
    }


async def edit(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    chat_id = _chat_id(args)
    payload = _compact(
        {
            "chat_id": chat_id,
            "message_id": args["messageId"],
            "text": args["text"],
            "parse_mode": _parse_mode(args),
            "disable_web_page_preview": args.get("disableWebPagePreview"),
        }
    )
    result = await _call("editMessageText", args, payload)
    message_id = result.get("message_id") if isinstance(result, dict) else None
    return {
        "ok": True,
        "chatId": chat_id,
        "messageId": message_id or args["messageId"],
        "edited": True,
    }


async def delete(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    chat_id = _chat_id(args)
    await _call("deleteMessage", args, {"chat_id": chat_id, "message_id": args["messageId"]})
    return {"ok": True, "chatId": chat_id, "messageId": args["messageId"], "deleted": True}


async def react(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    chat_id = _chat_id(args)
    cleared = bool(args.get("clear", False))
    emojis: list[str] = []
    if not cleared:
        for emoji in [args.get("emoji"), *(args.get("emojis") or [])]:
            if isinstance(emoji, str) and emoji.strip() and emoji.strip() not in emojis:
                emojis.append(emoji.strip())
        if not emojis:
            raise ToolError(
                "Provide 'emoji' or 'emojis' to set a message reaction, or set "
                "'clear=true' to remove reactions.",
                code=ErrorCode.E_TOOL_INVALID_ARGS,
            )
    reactions = [{"type": "emoji", "emoji": emoji} for emoji in emojis]
    await _call(
        "setMessageReaction",
        args,
        _compact(
            {
                "chat_id": chat_id,
                "message_id": args["messageId"],
                "reaction": reactions,
                "is_big": args.get("isBig"),
            }
        ),
    )
    return {
        "ok": True,
        "chatId": chat_id,
        "messageId": args["messageId"],
        "cleared": cleared,
        "emojis": emojis,
        "reactionCount": len(reactions),
    }


async def set_chat_action(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    chat_id = _chat_id(args)
    raw = args.get("action") or args.get("status") or "typing"
    normalized = _normalize(raw)
    if normalized not in CHAT_ACTIONS:
        raise ToolError(
            f"Unsupported chat action '{raw}'. Use one of: {', '.join(CHAT_ACTIONS)}.",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    action = normalized.replace("-", "_")
    await _call("sendChatAction", args, {"chat_id": chat_id, "action": action})
    return {"ok": True, "chatId": chat_id, "status": action, "action": action}


async def download_file(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    file_id = _botapi.first_text(args, ("fileId", "file_id"))
    if file_id is None:
        raise ToolError(
            "Provide 'fileId' (or 'file_id'): the file_id from a Telegram message",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    max_bytes = _botapi.download_limit(args)
    target = _botapi.target(SERVICE, args)
    info = await _call("getFile", args, {"file_id": file_id}, target=target)
    info = info if isinstance(info, dict) else {}
    file_path = info.get("file_path")
    if not isinstance(file_path, str) or not file_path:
        raise ToolError(
            "[telegram] getFile returned no file_path (the file may be over the "
            "Bot API's 20 MB download limit)",
            code=ErrorCode.E_DOWNLOAD_FAILED,
        )
    file_size = info.get("file_size")
    if isinstance(file_size, int) and file_size > max_bytes:
        raise _botapi.too_large(SERVICE, "downloadFile", file_size, max_bytes)
    url = f"{target.base_url}/file/bot{target.token}/{file_path}"
    got = await _botapi.download(
        SERVICE,
        url,
        {},
        token=target.token,
        timeout=_botapi.timeout_ms(args),
        max_bytes=max_bytes,
        what="downloadFile",
    )
    content_type = _botapi.content_type_of(got.headers, file_path)
    return {
        "ok": True,
        "fileId": info.get("file_id", file_id),
        "fileUniqueId": info.get("file_unique_id"),
        "filePath": file_path,
        "fileSize": file_size if isinstance(file_size, int) else None,
        "downloadUrl": _botapi.redact(url, target.token),
        "contentType": content_type,
        "sizeBytes": len(got.data),
        **_botapi.file_payload(ctx, got.data, content_type, args),
    }


async def _call(
    method: str, args: dict[str, Any], payload: dict[str, Any], *, target: Target | None = None
) -> Any:
    target = target or _botapi.target(SERVICE, args)
    url = f"{target.base_url}/bot{target.token}/{method}"

    async def post(client: httpx.AsyncClient) -> httpx.Response:
        request = client.build_request("POST", url, json=payload)
        return await client.send(request, stream=True)

    answer = await _botapi.call(SERVICE, method, target.token, _botapi.timeout_ms(args), post)
    body = answer.body if isinstance(answer.body, dict) else {}
    if 200 <= answer.status < 300 and body.get("ok") is True:
        return body.get("result")
    raise _api_error(method, answer, body, target.token)


def _api_error(method: str, answer: Answer, body: dict[str, Any], token: str) -> ToolError:
    description = body.get("description")
    if not isinstance(description, str) or not description.strip():
        description = _botapi.http_description(answer)
    code = body.get("error_code", answer.status)
    failure = f"{method} failed (code {code}): {_botapi.redact(description, token)}"
    if answer.status == 429 or code == 429:
        return _botapi.rate_limited(SERVICE, failure, answer)
    return ToolError(
        f"[telegram] {failure}", code=ErrorCode.E_TELEGRAM_API, suggestion=_suggestion(code)
    )


def _suggestion(code: Any) -> str | None:
    return (
        {
            400: "check chatId, messageId and the text/parse mode",
            401: "the bot token is wrong or revoked",
            403: "the bot cannot write to this chat (blocked, kicked or never started)",
            404: "the method or bot token is wrong",
        }.get(code)
        if isinstance(code, int)
        else None
    )


def _chat_id(args: dict[str, Any]) -> str:
    value = args.get("chatId")
    if isinstance(value, bool) or value is None:
        raise ToolError(
            "'chatId' must be a non-empty string or integer", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    text = str(value).strip()
    if not text:
        raise ToolError(
            "'chatId' must be a non-empty string or integer", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    return text


def _parse_mode(args: dict[str, Any]) -> str | None:
    raw = args.get("parseMode")
    if raw is None or not raw.strip():
        return None
    mode = PARSE_MODES.get(_normalize(raw))
    if mode is None:
        raise ToolError(
            f"Unsupported parseMode '{raw}'. Use one of: Markdown, MarkdownV2, HTML.",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    return mode


def _normalize(raw: str) -> str:
    return re.sub(r"[\s_]+", "-", raw.strip().lower())


def _compact(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


handlers = {
    "send": send,
    "edit": edit,
    "delete": delete,
    "react": react,
    "setChatAction": set_chat_action,
    "downloadFile": download_file,
}
