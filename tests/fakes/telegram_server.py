"""A Telegram Bot API server on 127.0.0.1 that answers like the real one, for the telegram tool
(sendMessage, editMessageText, deleteMessage, setMessageReaction, sendChatAction, getFile and the
file download) and the telegram connector (long-polled getUpdates, sendMessage).

    async with FakeTelegramServer(token="123:abc") as server:
        ...  # the tool's apiBaseUrl, or the connector's TELEGRAM_API_BASE_URL = server.base_url
        message_id = server.seed_chat_message("42", "draft")  # already in the chat, for edits
        update_id = server.push_update_message(42, "hi")       # a user writes: a new update
        server.rate_limit("sendMessage", retry_after=1)   # next call: 429 + parameters.retry_after
        server.queue_raw("sendMessage", 502, "<html>Bad Gateway</html>")

`/bot<token>/<method>` takes its parameters as a GET query or a POST JSON or form body; a wrong
token gets 401 `Unauthorized`. Errors are the real shapes:
`{"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}`. Only chats in
`server.chats` exist (a chat with a seeded or pushed message does). Files added with `add_file`
are served by `getFile` and `GET /file/bot<token>/<file_path>`.

`getUpdates` returns the queued updates whose id is >= `offset` and forgets the ones below it
(that is how a bot confirms updates); with none, it holds the request up to `timeout` seconds.

Every call lands in `server.calls` as (method, params), its arrival in `server.call_times`
(see `calls_of` and `times_of`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes._http_fake import ApiFake, error_json, ok_json

CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
PARSE_MODES = frozenset({"Markdown", "MarkdownV2", "HTML"})
REACTIONS = frozenset({"👍", "👎", "❤", "🔥", "🎉", "👀", "🙏", "😁"})


@dataclass
class _File:
    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes
    content_type: str


class FakeTelegramServer(ApiFake):
    shutdown_timeout = 0.5  # a getUpdates long poll may still be waiting at close

    def __init__(self, *, token: str = "123456:TEST-token", chats: set[str] | None = None) -> None:
        super().__init__()
        self.token = token
        self.chats = set(chats) if chats is not None else {"42", "-1001234567890"}
        self.messages: dict[tuple[str, int], dict[str, Any]] = {}
        self.reactions: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.actions: list[tuple[str, str]] = []
        self.updates: list[dict[str, Any]] = []
        self.file_requests: list[str] = []
        self._files: dict[str, _File] = {}
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(1)
        self._arrived = asyncio.Event()

    # --- scripting -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self.root_url

    def seed_chat_message(self, chat_id: str, text: str) -> int:
        """A message already in the chat (for the bot to edit, delete, react or reply to), sent
        by the bot itself; it is not an update. Returns its message_id."""
        self.chats.add(chat_id)
        message_id: int = self._store(chat_id, text)["message_id"]
        return message_id

    def push_update(self, **fields: Any) -> int:
        """Queue an update for `getUpdates` (e.g. `edited_message={...}`); returns its id."""
        update_id = next(self._update_ids)
        self.updates.append({"update_id": update_id, **fields})
        self._arrived.set()
        return update_id

    def push_update_message(
        self, chat_id: int, text: str | None = None, *, is_bot: bool = False, **extra: Any
    ) -> int:
        """A message from user Alice (or, `is_bot`, from another bot) arriving in a private chat,
        queued as an update; `extra` adds message fields (caption, photo...). Returns the
        update_id."""
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": 1_700_000_000,
            "chat": {"id": chat_id, "type": "private", "username": "alice"},
            "from": {
                "id": 7 if not is_bot else 99,
                "is_bot": is_bot,
                "first_name": "Alice",
                "username": "alice" if not is_bot else "somebot",
            },
            **extra,
        }
        if text is not None:
            message["text"] = text
        self.chats.add(str(chat_id))
        self.messages[(str(chat_id), message["message_id"])] = message
        return self.push_update(message=message)

    def add_file(
        self,
        file_id: str,
        file_path: str,
        data: bytes,
        content_type: str = "application/octet-stream",
    ) -> None:
        self._files[file_id] = _File(file_id, f"u-{file_id}", file_path, data, content_type)

    def queue_raw(
        self, method: str, status: int, body: str, content_type: str = "text/html"
    ) -> None:
        self.script(method, web.Response(status=status, text=body, content_type=content_type))

    def _rate_limited(self, retry_after: int) -> web.Response:
        return _error(
            429,
            f"Too Many Requests: retry after {retry_after}",
            parameters={"retry_after": retry_after},
        )

    # --- the API -------------------------------------------------------------------------------

    def _routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._method)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)

    async def _method(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                try:
                    params.update(await request.json())
                except ValueError:
                    return _error(400, "Bad Request: can't parse JSON body")
            else:
                params.update(dict(await request.post()))
        self.record(method, params)
        scripted = self.take_scripted(method)
        if scripted is not None:
            return scripted
        handler = self.api_handler(method)
        if handler is None:
            return _error(404, "Not Found")
        response: web.Response = await handler(params)
        return response

    async def _api_getUpdates(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        offset = int(p.get("offset") or 0)
        timeout = float(p.get("timeout") or 0)
        if offset:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
        deadline = time.monotonic() + timeout
        while not self.updates and time.monotonic() < deadline:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), deadline - time.monotonic())
            except TimeoutError:
                break
        return _ok(list(self.updates))

    async def _api_sendMessage(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        chat = str(p.get("chat_id", ""))
        if chat not in self.chats:
            return _error(400, "Bad Request: chat not found")
        if not str(p.get("text", "")).strip():
            return _error(400, "Bad Request: message text is empty")
        if "parse_mode" in p and p["parse_mode"] not in PARSE_MODES:
            return _error(400, f"Bad Request: unsupported parse_mode {p['parse_mode']}")
        reply = p.get("reply_to_message_id")
        if (
            reply is not None
            and (chat, reply) not in self.messages
            and not p.get("allow_sending_without_reply")
        ):
            return _error(400, "Bad Request: message to be replied not found")
        return _ok(self._store(chat, p["text"]))

    async def _api_editMessageText(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        key = (str(p.get("chat_id", "")), p.get("message_id", 0))  # ids count from 1
        if key[0] not in self.chats:
            return _error(400, "Bad Request: chat not found")
        message = self.messages.get(key)
        if message is None:
            return _error(400, "Bad Request: message to edit not found")
        if message["text"] == p.get("text"):
            return _error(
                400,
                "Bad Request: message is not modified: specified new message "
                "content and reply markup are exactly the same as a current "
                "content and reply markup of the message",
            )
        message["text"] = p["text"]
        message["edit_date"] = int(time.time())
        return _ok(message)

    async def _api_deleteMessage(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        key = (str(p.get("chat_id", "")), p.get("message_id", 0))  # ids count from 1
        if self.messages.pop(key, None) is None:
            return _error(400, "Bad Request: message to delete not found")
        return _ok(True)

    async def _api_setMessageReaction(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        key = (str(p.get("chat_id", "")), p.get("message_id", 0))  # ids count from 1
        if key not in self.messages:
            return _error(400, "Bad Request: message to react not found")
        reaction = p.get("reaction", [])
        if any(item.get("emoji") not in REACTIONS for item in reaction):
            return _error(400, "Bad Request: REACTION_INVALID")
        self.reactions[key] = reaction
        return _ok(True)

    async def _api_sendChatAction(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        chat = str(p.get("chat_id", ""))
        if chat not in self.chats:
            return _error(400, "Bad Request: chat not found")
        if p.get("action") not in CHAT_ACTIONS:
            return _error(400, "Bad Request: wrong parameter action in request")
        self.actions.append((chat, p["action"]))
        return _ok(True)

    async def _api_getFile(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        file = self._files.get(str(p.get("file_id", "")))
        if file is None:
            return _error(400, "Bad Request: invalid file_id")
        return _ok(
            {
                "file_id": file.file_id,
                "file_unique_id": file.file_unique_id,
                "file_size": len(file.data),
                "file_path": file.file_path,
            }
        )

    async def _file(self, request: web.Request) -> web.Response:
        self.file_requests.append(request.match_info["path"])
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        for file in self._files.values():
            if file.file_path == request.match_info["path"]:
                return web.Response(body=file.data, content_type=file.content_type)
        return _error(404, "Not Found")

    def _store(self, chat: str, text: str) -> dict[str, Any]:
        message_id = next(self._message_ids)
        message = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": int(chat), "type": "private" if int(chat) > 0 else "supergroup"},
            "text": text,
        }
        self.messages[(chat, message_id)] = message
        return message


def _ok(result: Any) -> web.Response:
    return ok_json(result=result)


def _error(code: int, description: str, **extra: Any) -> web.Response:
    return error_json(code, error_code=code, description=description, **extra)
