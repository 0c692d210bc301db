"""A Telegram Bot API server on 127.0.0.1 for the telegram *connector*: long-polled getUpdates
and sendMessage, answering like the real API.

    async with FakeBotApi(token="123:abc") as api:
        api.add_message(chat_id=42, text="hi")            # a user's message, queued as an update
        api.rate_limit("getUpdates", retry_after=1)       # next call: 429 + parameters.retry_after
        ...  # connector config TELEGRAM_API_BASE_URL = api.base_url

`getUpdates` (GET query or POST JSON/form) returns the queued updates whose id is >= `offset`
and forgets the ones below it (that is how a bot confirms updates); with none, it holds the
request up to `timeout` seconds. A wrong token gets 401 `Unauthorized`. Calls are recorded in
`calls` as (method, params, monotonic time).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from collections import defaultdict, deque
from typing import Any

from aiohttp import web


class FakeBotApi:
    def __init__(self, *, token: str = "123456:TEST-token") -> None:
        self.token = token
        self.updates: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any], float]] = []
        self._ids = itertools.count(1000)
        self._message_ids = itertools.count(1)
        self._scripted: dict[str, deque[web.Response]] = defaultdict(deque)
        self._arrived = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def base_url(self) -> str:
        assert self._port is not None, "server not started"
        return f"http://127.0.0.1:{self._port}"

    def add_update(self, **fields: Any) -> int:
        update_id = next(self._ids)
        self.updates.append({"update_id": update_id, **fields})
        self._arrived.set()
        return update_id

    def add_message(self, chat_id: int, text: str | None = None, *, is_bot: bool = False,
                    **extra: Any) -> int:
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": 1_700_000_000,
            "chat": {"id": chat_id, "type": "private", "username": "alice"},
            "from": {"id": 7 if not is_bot else 99, "is_bot": is_bot, "first_name": "Alice",
                     "username": "alice" if not is_bot else "somebot"},
            **extra,
        }
        if text is not None:
            message["text"] = text
        return self.add_update(message=message)

    def rate_limit(self, method: str, retry_after: int) -> None:
        self._scripted[method].append(web.json_response(
            {"ok": False, "error_code": 429,
             "description": f"Too Many Requests: retry after {retry_after}",
             "parameters": {"retry_after": retry_after}}, status=429))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params, _ in self.calls if name == method]

    def times_of(self, method: str) -> list[float]:
        return [at for name, _, at in self.calls if name == method]

    async def __aenter__(self) -> FakeBotApi:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._method)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
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
        self.calls.append((method, params, time.monotonic()))
        if self._scripted[method]:
            return self._scripted[method].popleft()
        if method == "getUpdates":
            return await self._get_updates(params)
        if method == "sendMessage":
            if not str(params.get("text", "")).strip():
                return _error(400, "Bad Request: message text is empty")
            return _ok({"message_id": next(self._message_ids), "date": int(time.time()),
                        "chat": {"id": params.get("chat_id")}, "text": params["text"]})
        return _error(404, "Not Found")

    async def _get_updates(self, params: dict[str, Any]) -> web.Response:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
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


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(code: int, description: str) -> web.Response:
    return web.json_response({"ok": False, "error_code": code, "description": description},
                             status=code)
