"""A Slack Web API server on 127.0.0.1 that answers like the real one, for the slack tool.

    async with FakeSlackServer(token="xoxb-test") as server:
        ...  # call the tool with apiBaseUrl=server.base_url
        server.rate_limit("chat.postMessage", retry_after=1)  # next call: 429 + Retry-After

`POST /api/<method>` with `Authorization: Bearer <token>`; write methods take JSON, read methods
(conversations.*) form fields, as Slack documents. Errors are Slack's: HTTP 200 with
`{"ok": false, "error": "channel_not_found"}`; `not_authed` without a token, `invalid_auth` with
a wrong one; 429 with a Retry-After header and `ratelimited`. Only channels in
`server.channels` exist. Files added with `add_file` are served at `server.file_url(name)`; without
the bearer token the answer is Slack's HTML sign-in page (status 200), as the real file host does.
"""

from __future__ import annotations

import itertools
import socket
from collections import defaultdict, deque
from typing import Any

from aiohttp import web

EMOJI = frozenset({"thumbsup", "eyes", "wave", "tada", "white_check_mark", "+1"})
READ_METHODS = frozenset({"conversations.history", "conversations.replies"})


class FakeSlackServer:
    def __init__(self, *, token: str = "xoxb-test-token",
                 channels: tuple[str, ...] = ("C0123456789",)) -> None:
        self.token = token
        self.channels: dict[str, list[dict[str, Any]]] = {c: [] for c in channels}
        self.reactions: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.content_types: list[str] = []
        self.file_requests: list[str | None] = []  # the Authorization header of each
        self._files: dict[str, tuple[bytes, str]] = {}
        self._scripted: dict[str, deque[web.Response]] = defaultdict(deque)
        self._ts = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # --- scripting -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._port is not None, "server not started"
        return f"http://127.0.0.1:{self._port}/api"

    def file_url(self, name: str) -> str:
        assert self._port is not None, "server not started"
        return f"http://127.0.0.1:{self._port}/files-pri/T1-F1/{name}"

    def add_message(self, channel: str, text: str, thread_ts: str | None = None) -> str:
        return self._store(channel, text, thread_ts)["ts"]

    def add_file(self, name: str, data: bytes, content_type: str) -> str:
        self._files[name] = (data, content_type)
        return self.file_url(name)

    def rate_limit(self, method: str, retry_after: int, times: int = 1) -> None:
        for _ in range(times):
            self._scripted[method].append(web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429,
                headers={"Retry-After": str(retry_after)}))

    def fail(self, method: str, error: str, **extra: Any) -> None:
        self._scripted[method].append(web.json_response({"ok": False, "error": error, **extra}))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [payload for name, payload in self.calls if name == method]

    # --- life cycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> FakeSlackServer:
        app = web.Application()
        app.router.add_post("/api/{method}", self._method)
        app.router.add_get("/files-pri/{team}/{name}", self._file)
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
        method = request.match_info["method"]
        self.content_types.append(request.content_type)
        if request.content_type == "application/json":
            payload = await request.json() if method not in READ_METHODS else {}
        else:
            payload = dict(await request.post())
        self.calls.append((method, payload))
        auth = request.headers.get("Authorization", "")
        if not auth:
            return _error("not_authed")
        if auth != f"Bearer {self.token}":
            return _error("invalid_auth")
        if self._scripted[method]:
            return self._scripted[method].popleft()
        handler = getattr(self, "_api_" + method.replace(".", "_"), None)
        if handler is None:
            return _error("unknown_method")
        channel = payload.get("channel")
        if channel not in self.channels:
            return _error("channel_not_found")
        return handler(payload, self.channels[channel])

    def _api_chat_postMessage(self, p: dict[str, Any], log: list[dict[str, Any]]) -> web.Response:
        if not str(p.get("text", "")).strip():
            return _error("no_text")
        message = self._store(p["channel"], p["text"], p.get("thread_ts"))
        return _ok(channel=p["channel"], ts=message["ts"], message=message)

    def _api_chat_update(self, p: dict[str, Any], log: list[dict[str, Any]]) -> web.Response:
        message = _find(log, p.get("ts"))
        if message is None:
            return _error("message_not_found")
        message["text"] = p.get("text", "")
        return _ok(channel=p["channel"], ts=message["ts"], text=message["text"])

    def _api_chat_delete(self, p: dict[str, Any], log: list[dict[str, Any]]) -> web.Response:
        message = _find(log, p.get("ts"))
        if message is None:
            return _error("message_not_found")
        log.remove(message)
        return _ok(channel=p["channel"], ts=message["ts"])

    def _api_reactions_add(self, p: dict[str, Any], log: list[dict[str, Any]]) -> web.Response:
        if _find(log, p.get("timestamp")) is None:
            return _error("message_not_found")
        if p.get("name") not in EMOJI:
            return _error("invalid_name")
        names = self.reactions[(p["channel"], p["timestamp"])]
        if p["name"] in names:
            return _error("already_reacted")
        names.append(p["name"])
        return _ok()

    def _api_conversations_history(self, p: dict[str, Any],
                                   log: list[dict[str, Any]]) -> web.Response:
        top = [m for m in log if m.get("thread_ts") in (None, m["ts"])]
        return self._page(p, top)

    def _api_conversations_replies(self, p: dict[str, Any],
                                   log: list[dict[str, Any]]) -> web.Response:
        parent = _find(log, p.get("ts"))
        if parent is None:
            return _error("thread_not_found")
        thread = [m for m in log if m["ts"] == parent["ts"] or m.get("thread_ts") == parent["ts"]]
        return self._page(p, thread, newest_first=False)

    def _page(self, p: dict[str, Any], messages: list[dict[str, Any]], *,
              newest_first: bool = True) -> web.Response:
        inclusive = p.get("inclusive") in ("true", "1", True)
        latest, oldest = p.get("latest"), p.get("oldest")

        def keep(m: dict[str, Any]) -> bool:
            ts = float(m["ts"])
            if latest is not None and (ts > float(latest) or (ts == float(latest)
                                                              and not inclusive)):
                return False
            return not (oldest is not None and (ts < float(oldest) or (ts == float(oldest)
                                                                       and not inclusive)))

        chosen = sorted((m for m in messages if keep(m)), key=lambda m: float(m["ts"]),
                        reverse=newest_first)
        start = int(p.get("cursor") or 0)
        limit = int(p.get("limit") or 100)
        page = chosen[start:start + limit]
        more = start + limit < len(chosen)
        return _ok(messages=page, has_more=more,
                   response_metadata={"next_cursor": str(start + limit) if more else ""})

    async def _file(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization")
        self.file_requests.append(auth)
        if auth != f"Bearer {self.token}":
            return web.Response(text="<!DOCTYPE html><html><title>Slack</title>Sign in</html>",
                                content_type="text/html")
        found = self._files.get(request.match_info["name"])
        if found is None:
            return web.Response(status=404, text="Not Found")
        data, content_type = found
        return web.Response(body=data, content_type=content_type, headers={
            "ETag": '"etag-1"',
            "Content-Disposition": f'attachment; filename="{request.match_info["name"]}"'})

    def _store(self, channel: str, text: str, thread_ts: str | None) -> dict[str, Any]:
        n = next(self._ts)
        message: dict[str, Any] = {"type": "message", "user": "U0BOT", "text": text,
                                   "ts": f"{1700000000 + n}.{n:06d}"}
        if thread_ts:
            message["thread_ts"] = thread_ts
        self.channels[channel].append(message)
        return message


def _find(log: list[dict[str, Any]], ts: Any) -> dict[str, Any] | None:
    return next((m for m in log if m["ts"] == ts), None)


def _ok(**fields: Any) -> web.Response:
    return web.json_response({"ok": True, **fields})


def _error(error: str) -> web.Response:
    return web.json_response({"ok": False, "error": error})
