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
from collections import defaultdict
from typing import Any

from aiohttp import web

from tests.fakes._http_fake import ApiFake, error_json, ok_json

EMOJI = frozenset({"thumbsup", "eyes", "wave", "tada", "white_check_mark", "+1"})
READ_METHODS = frozenset({"conversations.history", "conversations.replies"})


class FakeSlackServer(ApiFake):
    def __init__(
        self, *, token: str = "xoxb-test-token", channels: tuple[str, ...] = ("C0123456789",)
    ) -> None:
        super().__init__()
        self.token = token
        self.channels: dict[str, list[dict[str, Any]]] = {c: [] for c in channels}
        self.reactions: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.content_types: list[str] = []
        self.file_requests: list[str | None] = []  # the Authorization header of each
        self._files: dict[str, tuple[bytes, str]] = {}
        self._ts = itertools.count(1)

    # --- scripting -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/api"

    def file_url(self, name: str) -> str:
        return f"{self.root_url}/files-pri/T1-F1/{name}"

    def add_message(self, channel: str, text: str, thread_ts: str | None = None) -> str:
        ts: str = self._store(channel, text, thread_ts)["ts"]
        return ts

    def add_file(self, name: str, data: bytes, content_type: str) -> str:
        self._files[name] = (data, content_type)
        return self.file_url(name)

    def fail(self, method: str, error: str, **extra: Any) -> None:
        self.script(method, _error(error, **extra))

    def _rate_limited(self, retry_after: int) -> web.Response:
        return error_json(429, error="ratelimited", headers={"Retry-After": str(retry_after)})

    # --- the API -------------------------------------------------------------------------------

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/api/{method}", self._method)
        app.router.add_get("/files-pri/{team}/{name}", self._file)

    async def _method(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        self.content_types.append(request.content_type)
        if request.content_type == "application/json":
            payload = await request.json() if method not in READ_METHODS else {}
        else:
            payload = dict(await request.post())
        self.record(method, payload)
        auth = request.headers.get("Authorization", "")
        if not auth:
            return _error("not_authed")
        if auth != f"Bearer {self.token}":
            return _error("invalid_auth")
        scripted = self.take_scripted(method)
        if scripted is not None:
            return scripted
        handler = self.api_handler(method)
        if handler is None:
            return _error("unknown_method")
        channel = payload.get("channel")
        if channel not in self.channels:
            return _error("channel_not_found")
        response: web.Response = handler(payload, self.channels[channel])
        return response

    def _api_chat_postMessage(self, p: dict[str, Any], log: list[dict[str, Any]]) -> web.Response:
        if not str(p.get("text", "")).strip():
            return _error("no_text")
        message = self._store(p["channel"], p["text"], p.get("thread_ts"))
        return ok_json(channel=p["channel"], ts=message["ts"], message=message)

    def _api_chat_update(self, p: dict[str, Any], log: list[dict[str, Any]]) -> web.Response:
        message = _find(log, p.get("ts"))
        if message is None:
            return _error("message_not_found")
        message["text"] = p.get("text", "")
        return ok_json(channel=p["channel"], ts=message["ts"], text=message["text"])

    def _api_chat_delete(self, p: dict[str, Any], log: list[dict[str, Any]]) -> web.Response:
        message = _find(log, p.get("ts"))
        if message is None:
            return _error("message_not_found")
        log.remove(message)
        return ok_json(channel=p["channel"], ts=message["ts"])

    def _api_reactions_add(self, p: dict[str, Any], log: list[dict[str, Any]]) -> web.Response:
        if _find(log, p.get("timestamp")) is None:
            return _error("message_not_found")
        if p.get("name") not in EMOJI:
            return _error("invalid_name")
        names = self.reactions[(p["channel"], p["timestamp"])]
        if p["name"] in names:
            return _error("already_reacted")
        names.append(p["name"])
        return ok_json()

    def _api_conversations_history(
        self, p: dict[str, Any], log: list[dict[str, Any]]
    ) -> web.Response:
        top = [m for m in log if m.get("thread_ts") in (None, m["ts"])]
        return self._page(p, top)

    def _api_conversations_replies(
        self, p: dict[str, Any], log: list[dict[str, Any]]
    ) -> web.Response:
        parent = _find(log, p.get("ts"))
        if parent is None:
            return _error("thread_not_found")
        thread = [m for m in log if m["ts"] == parent["ts"] or m.get("thread_ts") == parent["ts"]]
        return self._page(p, thread, newest_first=False)

    def _page(
        self, p: dict[str, Any], messages: list[dict[str, Any]], *, newest_first: bool = True
    ) -> web.Response:
        inclusive = p.get("inclusive") in ("true", "1", True)
        latest, oldest = p.get("latest"), p.get("oldest")

        def keep(m: dict[str, Any]) -> bool:
            ts = float(m["ts"])
            if latest is not None and (
                ts > float(latest) or (ts == float(latest) and not inclusive)
            ):
                return False
            return not (
                oldest is not None
                and (ts < float(oldest) or (ts == float(oldest) and not inclusive))
            )

        chosen = sorted(
            (m for m in messages if keep(m)), key=lambda m: float(m["ts"]), reverse=newest_first
        )
        start = int(p.get("cursor") or 0)
        limit = int(p.get("limit") or 100)
        page = chosen[start : start + limit]
        more = start + limit < len(chosen)
        return ok_json(
            messages=page,
            has_more=more,
            response_metadata={"next_cursor": str(start + limit) if more else ""},
        )

    async def _file(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization")
        self.file_requests.append(auth)
        if auth != f"Bearer {self.token}":
            return web.Response(
                text="<!DOCTYPE html><html><title>Slack</title>Sign in</html>",
                content_type="text/html",
            )
        found = self._files.get(request.match_info["name"])
        if found is None:
            return web.Response(status=404, text="Not Found")
        data, content_type = found
        return web.Response(
            body=data,
            content_type=content_type,
            headers={
                "ETag": '"etag-1"',
                "Content-Disposition": f'attachment; filename="{request.match_info["name"]}"',
            },
        )

    def _store(self, channel: str, text: str, thread_ts: str | None) -> dict[str, Any]:
        n = next(self._ts)
        message: dict[str, Any] = {
            "type": "message",
            "user": "U0BOT",
            "text": text,
            "ts": f"{1700000000 + n}.{n:06d}",
        }
        if thread_ts:
            message["thread_ts"] = thread_ts
        self.channels[channel].append(message)
        return message


def _find(log: list[dict[str, Any]], ts: Any) -> dict[str, Any] | None:
    return next((m for m in log if m["ts"] == ts), None)


def _error(error: str, **extra: Any) -> web.Response:
    return error_json(error=error, **extra)
