"""`slack` tool of @goondan/base: the Slack Web API for an agent.

Token: the call's `token`, else SLACK_BOT_TOKEN, SLACK_TOKEN or BRAIN_SLACK_BOT_TOKEN. Base URL:
the call's `apiBaseUrl`, else SLACK_API_BASE_URL, else https://slack.com/api (an env token only
goes to the configured one; see `_botapi.py`). An API error becomes
`[slack] <method> failed: <error>`. `downloadFile` sends the token only to Slack's file hosts
(or the API base URL's host) and refuses other URLs.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from base_tools import _botapi
from base_tools._botapi import Answer, Service, Target
from goondan import ErrorCode, ToolContext, ToolError

SERVICE = Service(
    name="slack",
    token_envs=("SLACK_BOT_TOKEN", "SLACK_TOKEN", "BRAIN_SLACK_BOT_TOKEN"),
    base_url_env="SLACK_API_BASE_URL",
    default_base_url="https://slack.com/api",
)
# Where Slack serves files from: the only hosts (besides the API's) that get the token.
FILE_HOST_SUFFIXES = ("slack.com", "slack-edge.com", "slack-files.com")
READ_METHODS = frozenset({"conversations.history", "conversations.replies"})


async def send(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    channel = _channel(args)
    body = await _call(
        "chat.postMessage",
        args,
        _compact(
            {
                "channel": channel,
                "text": args["text"],
                "thread_ts": args.get("threadTs"),
                "mrkdwn": args.get("mrkdwn"),
                "unfurl_links": args.get("unfurlLinks"),
                "unfurl_media": args.get("unfurlMedia"),
                "reply_broadcast": args.get("replyBroadcast"),
            }
        ),
    )
    message = body.get("message")
    if not isinstance(message, dict):
        message = {}
    return {
        "ok": True,
        "channelId": body.get("channel") or channel,
        "messageTs": body.get("ts"),
        "text": message.get("text") or args["text"],
    }


async def read(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    channel = _channel(args)
    message_ts = _botapi.first_text(args, ("messageTs", "ts", "timestamp"))
    thread_ts = _botapi.first_text(args, ("threadTs",))
    limit = int(args.get("limit", 1 if message_ts else 20))
    if not 1 <= limit <= 1000:
        raise ToolError(
            f"'limit' must be between 1 and 1000, got {limit}", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    inclusive = args.get("inclusive")
    if inclusive is None and message_ts:
        inclusive = True
    method = "conversations.replies" if thread_ts else "conversations.history"
    body = await _call(
        method,
        args,
        _compact(
            {
                "channel": channel,
                "ts": thread_ts,
                "latest": _botapi.first_text(args, ("latest",)) or message_ts,
                "oldest": _botapi.first_text(args, ("oldest",)),
                "inclusive": inclusive,
                "limit": limit,
                "cursor": _botapi.first_text(args, ("cursor",)),
            }
        ),
    )
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    found = None
    if message_ts:
        found = next((m for m in messages if m.get("ts") == message_ts), None)
    metadata = body.get("response_metadata")
    cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
    return {
        "ok": True,
        "channelId": channel,
        "method": method,
        "messageTs": message_ts,
        "threadTs": thread_ts,
        "count": len(messages),
        "found": found,
        "messages": messages,
        "hasMore": bool(body.get("has_more", False)),
        "nextCursor": cursor or None,
    }


async def edit(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    channel, message_ts = _channel(args), _message_ts(args)
    body = await _call(
        "chat.update",
        args,
        _compact(
            {
                "channel": channel,
                "ts": message_ts,
                "text": args["text"],
                "mrkdwn": args.get("mrkdwn"),
            }
        ),
    )
    return {
        "ok": True,
        "channelId": body.get("channel") or channel,
        "messageTs": body.get("ts") or message_ts,
        "edited": True,
    }


async def delete(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    channel, message_ts = _channel(args), _message_ts(args)
    await _call("chat.delete", args, {"channel": channel, "ts": message_ts})
    return {"ok": True, "channelId": channel, "messageTs": message_ts, "deleted": True}


async def react(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    channel, message_ts = _channel(args), _message_ts(args)
    names: list[str] = []
    for raw in [args.get("emoji"), *(args.get("emojis") or [])]:
        if not isinstance(raw, str):
            continue
        name = raw.strip()
        if len(name) >= 3 and name.startswith(":") and name.endswith(":"):
            name = name[1:-1].strip()
        if name and name not in names:
            names.append(name)
    if not names:
        raise ToolError(
            "Provide 'emoji' or 'emojis' to add a Slack reaction.",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    for name in names:
        if re.search(r"\s", name):
            raise ToolError(
                f"Invalid emoji name '{name}'. Emoji names must not contain whitespace.",
                code=ErrorCode.E_TOOL_INVALID_ARGS,
            )
    target = _botapi.target(SERVICE, args)
    for name in names:
        await _call(
            "reactions.add",
            args,
            {"channel": channel, "timestamp": message_ts, "name": name},
            target=target,
        )
    return {
        "ok": True,
        "channelId": channel,
        "messageTs": message_ts,
        "emojis": names,
        "reactionCount": len(names),
    }


async def download_file(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    url = _botapi.first_text(args, ("url", "fileUrl", "downloadUrl"))
    if url is None:
        raise ToolError(
            "Provide 'url' (or 'fileUrl' / 'downloadUrl'): the file's url_private "
            "or url_private_download",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    max_bytes = _botapi.download_limit(args)
    target = _botapi.target(SERVICE, args)
    _check_file_host(url, target)
    got = await _botapi.download(
        SERVICE,
        url,
        {"Authorization": f"Bearer {target.token}"},
        token=target.token,
        timeout=_botapi.timeout_ms(args),
        max_bytes=max_bytes,
        what="downloadFile",
    )
    content_type = _botapi.content_type_of(got.headers, httpx.URL(url).path)
    if content_type == "text/html" and not url.lower().split("?", 1)[0].endswith((".html", ".htm")):
        raise ToolError(
            "[slack] downloadFile got an HTML page instead of the file: the token "
            "is probably missing the files:read scope",
            code=ErrorCode.E_DOWNLOAD_FAILED,
            suggestion="add the files:read scope to the Slack app and reinstall it",
        )
    length = got.headers.get("content-length", "")
    return {
        "ok": True,
        "url": got.url,
        "contentType": content_type,
        "contentLength": int(length) if length.isdigit() else None,
        "sizeBytes": len(got.data),
        "etag": got.headers.get("etag"),
        "contentDisposition": got.headers.get("content-disposition"),
        **_botapi.file_payload(ctx, got.data, content_type, args),
    }


def _check_file_host(url: str, target: Target) -> None:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ToolError(f"invalid url {url!r}: {exc}", code=ErrorCode.E_TOOL_INVALID_ARGS) from None
    if parsed.scheme not in ("http", "https"):
        raise ToolError(
            f"Unsupported protocol: {parsed.scheme}:", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    api = httpx.URL(target.base_url)
    host = parsed.host.lower()
    slack_host = parsed.scheme == "https" and any(
        host == suffix or host.endswith("." + suffix) for suffix in FILE_HOST_SUFFIXES
    )
    same_as_api = (parsed.scheme, host, parsed.port) == (api.scheme, api.host.lower(), api.port)
    if not (slack_host or same_as_api):
        raise ToolError(
            f"[slack] downloadFile only fetches Slack files (https://files.slack.com"
            f"/...), not {parsed.host}: the bot token is not sent elsewhere",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion="use http-fetch__get for other URLs",
        )


async def _call(
    method: str, args: dict[str, Any], payload: dict[str, Any], *, target: Target | None = None
) -> dict[str, Any]:
    target = target or _botapi.target(SERVICE, args)
    url = f"{target.base_url}/{method}"
    headers = {"Authorization": f"Bearer {target.token}"}

    async def post(client: httpx.AsyncClient) -> httpx.Response:
        if method in READ_METHODS:  # Slack's read methods take form fields, not JSON
            form = {key: _form_value(value) for key, value in payload.items()}
            request = client.build_request("POST", url, data=form, headers=headers)
        else:
            request = client.build_request(
                "POST",
                url,
                json=payload,
                headers={**headers, "Content-Type": "application/json; charset=utf-8"},
            )
        return await client.send(request, stream=True)

    answer = await _botapi.call(SERVICE, method, target.token, _botapi.timeout_ms(args), post)
    body = answer.body if isinstance(answer.body, dict) else {}
    if 200 <= answer.status < 300 and body.get("ok") is True:
        return body
    raise _api_error(method, answer, body)


def _api_error(method: str, answer: Answer, body: dict[str, Any]) -> ToolError:
    error = body.get("error")
    reason = error if isinstance(error, str) and error else _botapi.http_description(answer)
    needed = body.get("needed")
    if isinstance(needed, str) and needed:
        reason += f" (needed scope: {needed})"
    failure = f"{method} failed: {reason}"
    if answer.status == 429 or reason == "ratelimited":
        return _botapi.rate_limited(SERVICE, failure, answer)
    return ToolError(
        f"[slack] {failure}", code=ErrorCode.E_SLACK_API, suggestion=_SUGGESTIONS.get(reason)
    )


_SUGGESTIONS = {
    "not_authed": "no token reached Slack; set SLACK_BOT_TOKEN",
    "invalid_auth": "the Slack token is wrong or revoked",
    "channel_not_found": "check channelId (a C…/D…/G… id, not the channel's name)",
    "not_in_channel": "invite the bot to the channel first",
    "message_not_found": "check messageTs (the message's ts, e.g. 1700000000.000100)",
    "missing_scope": "add the scope to the Slack app and reinstall it",
}


def _channel(args: dict[str, Any]) -> str:
    channel = _botapi.first_text(args, ("channelId", "channel"))
    if channel is None:
        raise ToolError(
            "'channelId' must be a non-empty string", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    return channel


def _message_ts(args: dict[str, Any]) -> str:
    ts = _botapi.first_text(args, ("messageTs", "ts", "timestamp"))
    if ts is None:
        raise ToolError(
            "'messageTs' must be a non-empty string", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    return ts


def _form_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _compact(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


handlers = {
    "send": send,
    "read": read,
    "edit": edit,
    "delete": delete,
    "react": react,
    "downloadFile": download_file,
}
