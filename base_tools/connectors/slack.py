"""`slack`: a Slack Events API endpoint.

Events: `app_mention` {channel_id, ts, thread_ts?, user_id?, team_id?, channel_type?} and
`message_im` (any other message the app receives) {channel_id, ts, thread_ts?, user_id?, ...}.
Instance key: `slack:<channel>:<thread_ts or ts>`. Attached files become `[image] <url>` or
`[file:<name>] <url>` lines of the text.

Config: HOST (127.0.0.1), SLACK_WEBHOOK_PORT | PORT (8787), SLACK_WEBHOOK_PATH | PATH (/),
SLACK_MESSAGE_MODE: `all` (default: mentions and every message), `mention` (mentions only),
`channel_and_threads` (mentions, direct messages and thread replies; no top-level chatter).
Secrets: SLACK_SIGNING_SECRET | signingSecret | SIGNING_SECRET. With one, every request must
carry a valid `X-Slack-Signature` (`v0=` HMAC-SHA256 of `v0:{timestamp}:{body}`) and an
`X-Slack-Request-Timestamp` within 5 minutes, else 401 and nothing is emitted.

`url_verification` challenges are answered; bot messages (bot_id, subtype bot_message), edits,
deletions and joins are ignored, and so is a channel message that also arrives as its
`app_mention`, and Slack's retries of an event already taken. REPLY=true with secret
SLACK_BOT_TOKEN posts the agent's answer in the thread (chat.postMessage; config
SLACK_API_BASE_URL, default https://slack.com/api).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import httpx
from aiohttp import web

from base_tools.connectors._common import (
    flag,
    hmac_sha256_hex,
    json_error,
    parse_object,
    record,
    same,
    secret,
    serve_post,
    setting,
    text_field,
)
from goondan import (
    ConnectorConfigError,
    ConnectorContext,
    EventRefused,
    PendingReply,
    ReplyFailed,
    ReplyTimeout,
    TaskSet,
)

SIGNATURE_WINDOW_S = 5 * 60
MODES = ("all", "mention", "channel_and_threads")
PLAIN_SUBTYPES = (None, "file_share", "thread_broadcast")  # subtypes that carry a user's words
SEEN_EVENTS = 1000
DEFAULT_API_BASE_URL = "https://slack.com/api"


def verify_slack_signature(
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    signing_secret: str,
    now: float | None = None,
) -> bool:
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > SIGNATURE_WINDOW_S:
        return False
    base = b"v0:" + timestamp.encode() + b":" + body
    return same("v0=" + hmac_sha256_hex(signing_secret, base), signature)


def _file_lines(event: dict[str, Any]) -> list[str]:
    lines = []
    for item in event.get("files") or []:
        item = record(item)
        url = text_field(item, "url_private", "permalink", "url_private_download")
        if url is None:
            continue
        if (text_field(item, "mimetype") or "").startswith("image/"):
            lines.append(f"[image] {url}")
        else:
            lines.append(f"[file:{text_field(item, 'name') or 'file'}] {url}")
    return lines


def to_event(payload: dict[str, Any], mode: str = "all") -> dict[str, Any] | None:
    """`ctx.emit` keyword arguments for an `event_callback`, or None to ignore it."""
    event = record(payload.get("event"))
    kind = event.get("type")
    if kind not in ("app_mention", "message"):
        return None
    if event.get("bot_id") or event.get("subtype") == "bot_message":
        return None
    channel, ts = text_field(event, "channel"), text_field(event, "ts")
    if channel is None or ts is None:
        return None
    thread_ts = text_field(event, "thread_ts")
    channel_type = text_field(event, "channel_type")
    text = text_field(event, "text") or ""
    if kind == "message":
        if event.get("subtype") not in PLAIN_SUBTYPES or mode == "mention":
            return None
        if mode == "channel_and_threads" and channel_type != "im" and thread_ts is None:
            return None
        bots = [text_field(record(a), "user_id") for a in payload.get("authorizations") or []]
        if channel_type != "im" and any(b and f"<@{b}>" in text for b in bots):
            return None  # the same words arrive as an app_mention
    text = "\n".join(line for line in [text, *_file_lines(event)] if line)
    if not text:
        return None
    properties = {
        "channel_id": channel,
        "ts": ts,
        "thread_ts": thread_ts,
        "user_id": text_field(event, "user"),
        "team_id": text_field(payload, "team_id") or text_field(event, "team"),
        "channel_type": channel_type,
    }
    return {
        "name": "app_mention" if kind == "app_mention" else "message_im",
        "text": text,
        "instance_key": f"slack:{channel}:{thread_ts or ts}",
        "properties": {k: v for k, v in properties.items() if v is not None},
    }


async def _post_reply(
    ctx: ConnectorContext,
    base_url: str,
    token: str,
    pending: PendingReply,
    channel: str,
    thread_ts: str,
) -> None:
    try:
        reply = await pending.reply()
    except (ReplyFailed, ReplyTimeout) as exc:
        ctx.logger.warning("[slack] no reply to post", channel=channel, error=exc.message)
        return
    if not reply.text.strip():
        return
    try:
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{base_url.rstrip('/')}/chat.postMessage",
                json={"channel": channel, "text": reply.text, "thread_ts": thread_ts},
                headers={"Authorization": f"Bearer {token}"},
                timeout=15.0,
            )
        body = record(response.json())
        if body.get("ok") is not True:
            ctx.logger.warning(
                "[slack] chat.postMessage failed",
                channel=channel,
                error=body.get("error") or f"HTTP {response.status_code}",
            )
    except (httpx.HTTPError, ValueError) as exc:
        ctx.logger.warning(
            "[slack] chat.postMessage failed", channel=channel, error=f"{type(exc).__name__}: {exc}"
        )


async def main(ctx: ConnectorContext) -> None:
    signing_secret = secret(ctx, "SLACK_SIGNING_SECRET", "signingSecret", "SIGNING_SECRET") or (
        ctx.config.get("SLACK_SIGNING_SECRET") or None
    )
    if signing_secret is None:
        ctx.logger.warning("[slack] no signing secret: requests are not verified")
    mode = (setting(ctx, "SLACK_MESSAGE_MODE") or "all").lower()
    if mode not in MODES:
        raise ConnectorConfigError(
            f"[slack] SLACK_MESSAGE_MODE must be one of {', '.join(MODES)}, got {mode!r}"
        )
    reply = flag(ctx, "REPLY")
    token = secret(ctx, "SLACK_BOT_TOKEN", "BOT_TOKEN")
    if reply and token is None:
        raise ConnectorConfigError("[slack] REPLY=true needs the secret SLACK_BOT_TOKEN")
    base_url = setting(ctx, "SLACK_API_BASE_URL") or DEFAULT_API_BASE_URL
    seen: OrderedDict[str, None] = OrderedDict()
    posting = TaskSet("slack replies")

    async def handle(request: web.Request, body: bytes) -> web.StreamResponse:
        if signing_secret is not None and not verify_slack_signature(
            body,
            request.headers.get("X-Slack-Request-Timestamp"),
            request.headers.get("X-Slack-Signature"),
            signing_secret,
        ):
            ctx.logger.warning("[slack] signature verification failed")
            return web.Response(status=401, text="Unauthorized")
        payload = parse_object(body)
        if payload is None:
            return web.Response(status=400, text="Bad Request")
        if payload.get("type") == "url_verification":
            return web.Response(
                text=text_field(payload, "challenge") or "", content_type="text/plain"
            )
        event_id = text_field(payload, "event_id")
        if event_id is not None and event_id in seen:
            return web.json_response({"ok": True, "ignored": True, "duplicate": True})
        event = to_event(payload, mode) if payload.get("type") == "event_callback" else None
        if event is None:
            return web.json_response({"ok": True, "ignored": True})
        try:
            if reply and token is not None:
                pending = await ctx.start_request(**event)
                props = event["properties"]
                posting.spawn(
                    _post_reply(
                        ctx,
                        base_url,
                        token,
                        pending,
                        props["channel_id"],
                        props.get("thread_ts") or props["ts"],
                    ),
                    name="post reply",
                )
            else:
                await ctx.emit(**event)
        except EventRefused as exc:
            ctx.logger.warning("[slack] event refused", error=exc.message)
            return json_error(422, exc.code, exc.message)
        if event_id is not None:
            seen[event_id] = None
            while len(seen) > SEEN_EVENTS:
                seen.popitem(last=False)
        return web.json_response({"ok": True})

    try:
        await serve_post(
            ctx,
            handle,
            name="slack",
            default_port=8787,
            port_keys=("SLACK_WEBHOOK_PORT", "PORT"),
            path_keys=("SLACK_WEBHOOK_PATH", "PATH"),
        )
    finally:
        await posting.close(grace_s=2.0)
