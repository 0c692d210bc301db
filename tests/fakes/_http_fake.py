"""What the fake HTTP servers share: an aiohttp app on an ephemeral 127.0.0.1 port, and, for the
chat-service fakes (Slack, Telegram), a record of the API calls and per-method scripted answers.

    class FakeThing(ApiFake):
        def _routes(self, app): app.router.add_post("/api/{method}", self._method)
        def _rate_limited(self, retry_after): return error_json(429, error="ratelimited")

    async with FakeThing() as server:
        server.rate_limit("post", retry_after=1)  # the next `post` call is answered with a 429
        ...  # the handler: self.record(method, payload), then self.take_scripted(method)
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any, Self

from aiohttp import web


class LoopbackServer:
    """An aiohttp app on a free 127.0.0.1 port while started; `async with` starts and closes it."""

    shutdown_timeout = 1.0  # how long closing waits for handlers still running

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    @property
    def root_url(self) -> str:
        """`http://127.0.0.1:PORT`."""
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not running")
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> None:
        app = web.Application()
        self._routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=self.shutdown_timeout)
        await self._runner.setup()
        # Bind the socket ourselves: port 0 gets a free ephemeral port, and the socket tells us
        # which one (aiohttp's TCPSite does not expose it publicly).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self._port = sock.getsockname()[1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._port = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class ApiFake(LoopbackServer):
    """A method-per-call API (Slack's `/api/<method>`, Telegram's `/bot<token>/<method>`).

    Every call lands in `calls` as (method, payload), its arrival (`time.monotonic()`) in
    `call_times`. Answers scripted per method (`script`, `rate_limit`) are served first, in order.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.call_times: list[float] = []
        self._scripted: dict[str, deque[web.Response]] = defaultdict(deque)

    def _rate_limited(self, retry_after: int) -> web.Response:
        """The service's 429 answer asking to wait `retry_after` seconds."""
        raise NotImplementedError

    def script(self, method: str, response: web.Response) -> None:
        """Answer the next call of `method` with `response`, whatever it asks."""
        self._scripted[method].append(response)

    def rate_limit(self, method: str, retry_after: int, times: int = 1) -> None:
        """Answer the next `times` calls of `method` with the service's 429."""
        for _ in range(times):
            self.script(method, self._rate_limited(retry_after))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [payload for name, payload in self.calls if name == method]

    def times_of(self, method: str) -> list[float]:
        return [
            at for (name, _), at in zip(self.calls, self.call_times, strict=True) if name == method
        ]

    def record(self, method: str, payload: dict[str, Any]) -> None:
        self.calls.append((method, payload))
        self.call_times.append(time.monotonic())

    def take_scripted(self, method: str) -> web.Response | None:
        """The next scripted answer for `method`, if any (it is used up)."""
        queue = self._scripted[method]
        return queue.popleft() if queue else None

    def api_handler(self, method: str) -> Any:
        """The `_api_<method>` method that answers `method` (dots as underscores), or None."""
        return getattr(self, "_api_" + method.replace(".", "_"), None)


def ok_json(**fields: Any) -> web.Response:
    """`{"ok": true, **fields}`, status 200."""
    return web.json_response({"ok": True, **fields})


def error_json(
    status: int = 200, *, headers: Mapping[str, str] | None = None, **fields: Any
) -> web.Response:
    """`{"ok": false, **fields}` with `status` (Slack says errors with 200, Telegram does not)."""
    return web.json_response({"ok": False, **fields}, status=status, headers=headers)
