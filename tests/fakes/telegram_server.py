"""A Telegram Bot API server on 127.0.0.1 that answers like the real one, for the telegram tool.

    async with FakeTelegramServer(token="123:abc") as server:
        ...  # call the tool with apiBaseUrl=server.base_url
        server.rate_limit("sendMessage", retry_after=1)   # next call: 429 + parameters.retry_after
        server.queue_raw("sendMessage", 502, "<html>Bad Gateway</html>")

`POST /bot<token>/<method>` with a JSON body; a wrong token gets 401 `Unauthorized`. Errors are
the real shapes: `{"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}`.
Only chats in `server.chats` exist. Files added with `add_file` are served by `getFile` and
`GET /file/bot<token>/<file_path>`. Every call lands in `server.calls` as (method, payload).
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

CHAT_ACTIONS = frozenset({
    "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
    "upload_document", "choose_sticker", "find_location", "record_video_note",
    "upload_video_note",
})
PARSE_MODES = frozenset({"Markdown", "MarkdownV2", "HTML"})
REACTIONS = frozenset({"👍", "👎", "❤", "🔥", "🎉", "👀", "🙏", "😁"})


@dataclass
class _File:
    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes
    content_type: str


class FakeTelegramServer:
    def __init__(self, *, token: str = "123456:TEST-token", chats: set[str] | None = None) -> None:
        self.token = token
        self.chats = set(chats) if chats is not None else {"42", "-1001234567890"}
        self.messages: dict[tuple[str, int], dict[str, Any]] = {}
        self.reactions: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.actions: list[tuple[str, str]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.file_requests: list[str] = []
        self._files: dict[str, _File] = {}
        self._scripted: dict[str, deque[web.Response]] = defaultdict(deque)
        self._next_id = 100
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # --- scripting -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._port is not None, "server not started"
        return f"http://127.0.0.1:{self._port}"

    def add_message(self, chat_id: str, text: str) -> int:
        return self._store(chat_id, text)["message_id"]

    def add_file(self, file_id: str, file_path: str, data: bytes,
                 content_type: str = "application/octet-stream") -> None:
        self._files[file_id] = _File(file_id, f"u-{file_id}", file_path, data, content_type)

    def rate_limit(self, method: str, retry_after: int, times: int = 1) -> None:
        for _ in range(times):
            self._scripted[method].append(web.json_response(
                {"ok": False, "error_code": 429,
                 "description": f"Too Many Requests: retry after {retry_after}",
                 "parameters": {"retry_after": retry_after}}, status=429))

    def queue_raw(self, method: str, status: int, body: str,
                  content_type: str = "text/html") -> None:
        self._scripted[method].append(web.Response(status=status, text=body,
                                                   content_type=content_type))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [payload for name, payload in self.calls if name == method]

    # --- life cycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> FakeTelegramServer:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._method)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self._port = sock.getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- the API -------------------------------------------------------------------------------

    async def _method(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        try:
            payload = await request.json() if request.can_read_body else {}
        except ValueError:
            return _error(400, "Bad Request: can't parse JSON body")
        self.calls.append((method, payload))
        if self._scripted[method]:
            return self._scripted[method].popleft()
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return _error(404, "Not Found")
        return handler(payload)

    def _api_sendMessage(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        chat = str(p.get("chat_id", ""))
        if chat not in self.chats:
            return _error(400, "Bad Request: chat not found")
        if not str(p.get("text", "")).strip():
            return _error(400, "Bad Request: message text is empty")
        if "parse_mode" in p and p["parse_mode"] not in PARSE_MODES:
            return _error(400, f"Bad Request: unsupported parse_mode {p['parse_mode']}")
        reply = p.get("reply_to_message_id")
        if reply is not None and (chat, reply) not in self.messages \
                and not p.get("allow_sending_without_reply"):
            return _error(400, "Bad Request: message to be replied not found")
        return _ok(self._store(chat, p["text"]))

    def _api_editMessageText(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        key = (str(p.get("chat_id", "")), p.get("message_id"))
        if key[0] not in self.chats:
            return _error(400, "Bad Request: chat not found")
        message = self.messages.get(key)
        if message is None:
            return _error(400, "Bad Request: message to edit not found")
        if message["text"] == p.get("text"):
            return _error(400, "Bad Request: message is not modified: specified new message "
                               "content and reply markup are exactly the same as a current "
                               "content and reply markup of the message")
        message["text"] = p["text"]
        message["edit_date"] = int(time.time())
        return _ok(message)

    def _api_deleteMessage(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        key = (str(p.get("chat_id", "")), p.get("message_id"))
        if self.messages.pop(key, None) is None:
            return _error(400, "Bad Request: message to delete not found")
        return _ok(True)

    def _api_setMessageReaction(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        key = (str(p.get("chat_id", "")), p.get("message_id"))
        if key not in self.messages:
            return _error(400, "Bad Request: message to react not found")
        reaction = p.get("reaction", [])
        if any(item.get("emoji") not in REACTIONS for item in reaction):
            return _error(400, "Bad Request: REACTION_INVALID")
        self.reactions[key] = reaction
        return _ok(True)

    def _api_sendChatAction(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        chat = str(p.get("chat_id", ""))
        if chat not in self.chats:
            return _error(400, "Bad Request: chat not found")
        if p.get("action") not in CHAT_ACTIONS:
            return _error(400, "Bad Request: wrong parameter action in request")
        self.actions.append((chat, p["action"]))
        return _ok(True)

    def _api_getFile(self, p: dict[str, Any]) -> web.Response:  # noqa: N802
        file = self._files.get(str(p.get("file_id", "")))
        if file is None:
            return _error(400, "Bad Request: invalid file_id")
        return _ok({"file_id": file.file_id, "file_unique_id": file.file_unique_id,
                    "file_size": len(file.data), "file_path": file.file_path})

    async def _file(self, request: web.Request) -> web.Response:
        self.file_requests.append(request.match_info["path"])
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        for file in self._files.values():
            if file.file_path == request.match_info["path"]:
                return web.Response(body=file.data, content_type=file.content_type)
        return _error(404, "Not Found")

    def _store(self, chat: str, text: str) -> dict[str, Any]:
        self._next_id += 1
        message = {"message_id": self._next_id, "date": int(time.time()),
                   "chat": {"id": int(chat), "type": "private" if int(chat) > 0 else "supergroup"},
                   "text": text}
        self.messages[(chat, self._next_id)] = message
        return message


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(code: int, description: str) -> web.Response:
    return web.json_response({"ok": False, "error_code": code, "description": description},
                             status=code)
