"""`telegram` (alias `telegram-polling`): long-polls the Bot API's getUpdates.

Events: `telegram_message` with properties update_id, chat_id, chat_type, chat_title,
chat_username, message_id, date, from_id, from_username, from_first_name, from_last_name, and
for pictures has_photo / photo_file_id, has_image_document / document_file_id /
document_mime_type / document_file_name. The text is the message text or caption, plus one
`[telegram_photo] file_id=...` line per picture. Instance key: `telegram:<chat id>`.

Secrets: TELEGRAM_BOT_TOKEN | BOT_TOKEN | TELEGRAM_TOKEN (required). Config (or secrets):
TELEGRAM_POLL_TIMEOUT_SECONDS (30), TELEGRAM_REQUEST_TIMEOUT_MS (poll timeout + 5 s),
TELEGRAM_RETRY_DELAY_MS (1000), TELEGRAM_INITIAL_OFFSET, TELEGRAM_API_BASE_URL
(https://api.telegram.org). REPLY=true posts the agent's answer back with sendMessage.

An update is confirmed to Telegram (the next getUpdates' offset, or a last call when stopping)
only after the orchestrator journaled its event, so a crash before that gets it delivered
again. A 429 waits `retry_after`;
other failures wait the retry delay. Messages from bots are ignored (no self-loops); so are
updates without text or picture.
"""

from __future__ import annotations

from typing import Any

import httpx

from base_tools.connectors._common import flag, ident, int_setting, record, setting, text_field
from goondan import (
    ConnectorConfigError,
    ConnectorContext,
    EventNotAcknowledged,
    EventRefused,
    PendingReply,
    ReplyFailed,
    ReplyTimeout,
    TaskSet,
)

EVENT = "telegram_message"
DEFAULT_API_BASE_URL = "https://api.telegram.org"
TOKEN_KEYS = ("TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN")
MESSAGE_LIMIT = 4096  # characters per sendMessage
SEND_ATTEMPTS = 3


class TelegramApiError(Exception):
    def __init__(self, status: int, description: str, retry_after: float | None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


def to_event(update: dict[str, Any]) -> dict[str, Any] | None:
    """`ctx.emit` keyword arguments for an update, or None for one that is not a user message."""
    update_id = update.get("update_id")
    message = record(update.get("message"))
    chat = record(message.get("chat"))
    chat_id = ident(chat.get("id"))
    if not isinstance(update_id, int) or chat_id is None:
        return None
    sender = record(message.get("from"))
    if sender.get("is_bot") is True:
        return None
    properties: dict[str, str | None] = {
        "update_id": str(update_id),
        "chat_id": chat_id,
        "chat_type": text_field(chat, "type"),
        "chat_title": text_field(chat, "title"),
        "chat_username": text_field(chat, "username"),
        "message_id": ident(message.get("message_id")),
        "date": ident(message.get("date")),
        "from_id": ident(sender.get("id")),
        "from_username": text_field(sender, "username"),
        "from_first_name": text_field(sender, "first_name"),
        "from_last_name": text_field(sender, "last_name"),
    }
    lines = [text_field(message, "text", "caption") or ""]
    photos = [p for p in message.get("photo") or [] if isinstance(p, dict) and p.get("file_id")]
    if photos:
        largest = max(photos, key=lambda p: (p.get("width") or 0) * (p.get("height") or 0))
        properties.update(has_photo="true", photo_file_id=str(largest["file_id"]))
        lines.append(f"[telegram_photo] file_id={largest['file_id']}")
    document = record(message.get("document"))
    mime = text_field(document, "mime_type") or ""
    if document.get("file_id") and mime.startswith("image/"):
        properties.update(
            has_image_document="true",
            document_file_id=str(document["file_id"]),
            document_mime_type=mime,
            document_file_name=text_field(document, "file_name"),
        )
        lines.append(f"[telegram_image_document] file_id={document['file_id']} mime_type={mime}")
    text = "\n".join(line for line in lines if line)
    if not text:
        return None
    return {
        "name": EVENT,
        "text": text,
        "instance_key": f"telegram:{chat_id}",
        "properties": {k: v for k, v in properties.items() if v is not None},
    }


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    return [text[i : i + limit] for i in range(0, len(text), limit)] or [""]


class BotApi:
    def __init__(self, client: httpx.AsyncClient, base_url: str, token: str) -> None:
        self._client = client
        self._base = f"{base_url.rstrip('/')}/bot{token}"

    async def call(self, method: str, payload: dict[str, Any], timeout_s: float) -> Any:
        """The `result` of a Bot API method. Raises `TelegramApiError` or `httpx.HTTPError`
        (whose text is redacted by the logger: the token is in the URL)."""
        response = await self._client.post(
            f"{self._base}/{method}", json=payload, timeout=timeout_s
        )
        try:
            body = response.json()
        except ValueError:
            body = None
        body = record(body)
        if response.status_code == 200 and body.get("ok") is True:
            return body.get("result")
        retry_after = record(body.get("parameters")).get("retry_after")
        if retry_after is None and "retry-after" in response.headers:
            try:
                retry_after = float(response.headers["retry-after"])
            except ValueError:
                retry_after = None
        description = text_field(body, "description") or f"HTTP {response.status_code}"
        status = body.get("error_code") if isinstance(body.get("error_code"), int) else None
        raise TelegramApiError(
            status or response.status_code,
            description,
            float(retry_after) if isinstance(retry_after, int | float) else None,
        )


async def _send_reply(
    ctx: ConnectorContext,
    api: BotApi,
    pending: PendingReply,
    chat_id: str,
    message_id: str | None,
    timeout_s: float,
) -> None:
    try:
        reply = await pending.reply()
    except (ReplyFailed, ReplyTimeout) as exc:
        ctx.logger.warning("[telegram] no reply to post", chatId=chat_id, error=exc.message)
        return
    if not reply.text.strip():
        return
    for i, chunk in enumerate(split_message(reply.text)):
        payload: dict[str, Any] = {"chat_id": chat_id, "text": chunk}
        if i == 0 and message_id is not None:
            payload["reply_parameters"] = {
                "message_id": int(message_id),
                "allow_sending_without_reply": True,
            }
        for _ in range(SEND_ATTEMPTS):
            try:
                await api.call("sendMessage", payload, timeout_s)
                break
            except TelegramApiError as exc:
                if exc.status != 429:
                    ctx.logger.warning(
                        "[telegram] sendMessage failed", chatId=chat_id, error=exc.description
                    )
                    return
                await ctx.sleep(exc.retry_after or 1.0)
            except httpx.HTTPError as exc:
                ctx.logger.warning(
                    "[telegram] sendMessage failed",
                    chatId=chat_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                return


async def main(ctx: ConnectorContext) -> None:
    token = next((ctx.secrets[k] for k in TOKEN_KEYS if ctx.secrets.get(k, "").strip()), None)
    if token is None:
        raise ConnectorConfigError(
            f"[telegram] missing bot token in secrets ({' / '.join(TOKEN_KEYS)})"
        )
    token = token.strip()
    poll_timeout = int_setting(ctx, "TELEGRAM_POLL_TIMEOUT_SECONDS", default=30, secrets=True)
    request_timeout = (
        int_setting(
            ctx,
            "TELEGRAM_REQUEST_TIMEOUT_MS",
            default=(poll_timeout + 5) * 1000,
            minimum=1,
            secrets=True,
        )
        / 1000
    )
    retry_delay = int_setting(ctx, "TELEGRAM_RETRY_DELAY_MS", default=1000, secrets=True) / 1000
    offset = int_setting(ctx, "TELEGRAM_INITIAL_OFFSET", default=0, secrets=True)
    base_url = setting(ctx, "TELEGRAM_API_BASE_URL", secrets=True) or DEFAULT_API_BASE_URL
    confirmed = offset
    reply = flag(ctx, "REPLY")
    replies = TaskSet("telegram replies")
    async with httpx.AsyncClient() as client:
        api = BotApi(client, base_url, token)
        ctx.logger.info("[telegram] polling", apiBaseUrl=base_url, reply=reply)
        try:
            while not ctx.stopping.is_set():
                payload: dict[str, Any] = {"timeout": poll_timeout}
                if offset > 0:
                    payload["offset"] = offset
                try:
                    updates = await ctx.unless_stopping(
                        api.call("getUpdates", payload, request_timeout)
                    )
                except TelegramApiError as exc:
                    if exc.status in (401, 404):
                        raise ConnectorConfigError(
                            f"[telegram] the Bot API rejected the token ({exc.description})"
                        ) from None
                    wait = exc.retry_after if exc.status == 429 and exc.retry_after else None
                    ctx.logger.warning(
                        "[telegram] getUpdates failed",
                        status=exc.status,
                        error=exc.description,
                        retryInS=wait or retry_delay,
                    )
                    await ctx.sleep(wait if wait is not None else retry_delay)
                    continue
                except httpx.HTTPError as exc:
                    ctx.logger.warning(
                        "[telegram] getUpdates request failed", error=f"{type(exc).__name__}: {exc}"
                    )
                    await ctx.sleep(retry_delay)
                    continue
                if updates is None:  # stopping
                    break
                confirmed = max(confirmed, payload.get("offset", 0))
                if not isinstance(updates, list):
                    ctx.logger.warning("[telegram] getUpdates returned a non-array result")
                    await ctx.sleep(retry_delay)
                    continue
                for update in updates:
                    update_id = record(update).get("update_id")
                    if not isinstance(update_id, int):
                        continue
                    event = to_event(record(update))
                    if event is not None:
                        try:
                            if reply:
                                pending = await ctx.start_request(**event)
                                props = event["properties"]
                                replies.spawn(
                                    _send_reply(
                                        ctx,
                                        api,
                                        pending,
                                        props["chat_id"],
                                        props.get("message_id"),
                                        request_timeout,
                                    ),
                                    name="send reply",
                                )
                            else:
                                await ctx.emit(**event)
                        except EventRefused as exc:
                            ctx.logger.warning(
                                "[telegram] update refused", updateId=update_id, error=exc.message
                            )
                        except EventNotAcknowledged:
                            raise  # not journaled: do not confirm it; a respawn gets it again
                    offset = max(offset, update_id + 1)
            if offset > confirmed:  # confirm the last batch now, not after a restart
                try:
                    await api.call(
                        "getUpdates",
                        {"offset": offset, "timeout": 0, "limit": 1},
                        min(request_timeout, 5.0),
                    )
                except (TelegramApiError, httpx.HTTPError) as exc:
                    ctx.logger.warning(
                        "[telegram] could not confirm the last updates", error=str(exc)
                    )
        finally:
            await replies.close(grace_s=2.0)
    ctx.logger.info("[telegram] stopped", offset=offset)
