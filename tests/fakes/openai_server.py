"""A scripted OpenAI-compatible Chat Completions server on 127.0.0.1, speaking the real wire format.

Two ways to run it, with the same scripting API:

    # In the test's own event loop:
    async with FakeOpenAIServer() as server:
        server.queue_reply(tool_calls=[{"name": "bash", "arguments": '{"cmd": "ls"}'}])
        server.queue_reply(text="done")
        ...  # point a Model at server.base_url

    # In a background thread, for a separate agent process (or sync code) to talk to:
    with FakeOpenAIServerThread() as server:
        server.queue_error(429, "slow down", headers={"retry-after": "1"})
        ...

`POST /v1/chat/completions` pops the next scripted response; with none queued it answers
`"echo: <last user message>"`. Every request's JSON body lands in `server.requests` and its
headers in `server.request_headers` (the Authorization header also in `server.authorizations`).
A request without an Authorization header gets 401, as from the real API; pass `api_key=` to
also require that exact key.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class _Reply:
    text: str | None
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str | None
    usage: tuple[int, int] | None
    delay_seconds: float


@dataclass(frozen=True)
class _Raw:
    status: int
    body: Any  # dict -> JSON, str -> text/plain
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0


class _Script:
    """What both runners share: the queue of responses and the record of requests.

    Guarded by a threading lock because in the thread runner the test thread queues while the
    server thread pops.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[_Reply | _Raw] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._ids = itertools.count(1)

    def push(self, item: _Reply | _Raw) -> None:
        with self._lock:
            self._queue.append(item)

    def record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)

    def pop(self) -> _Reply | _Raw | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, str]], int]:
        with self._lock:
            return list(self._requests), list(self._headers), len(self._queue)


class _ScriptingApi:
    """The methods tests call; shared by the in-loop and the thread runner."""

    _script: _Script
    _port: int | None

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, the value for `Model.spec.endpoint`."""
        if self._port is None:
            raise RuntimeError("the fake OpenAI server is not running")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of every JSON request body received so far, oldest first."""
        return self._script.snapshot()[0]

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Each request's HTTP headers, names lower-cased, parallel to `requests`."""
        return self._script.snapshot()[1]

    @property
    def authorizations(self) -> list[str | None]:
        """Each request's Authorization header (None when absent), parallel to `requests`."""
        return [h.get("authorization") for h in self._script.snapshot()[1]]

    @property
    def pending(self) -> int:
        """How many scripted responses have not been served yet."""
        return self._script.snapshot()[2]

    def queue_reply(
        self,
        text: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] = (),
        *,
        finish_reason: str | None = None,
        usage: tuple[int, int] | None = None,
        delay_seconds: float = 0.0,
    ) -> None:
        """Script the next successful completion.

        `tool_calls` items are `{"name": str, "arguments": str | dict, "id"?: str}`; a dict
        `arguments` is JSON-encoded, a str is sent as is (so malformed JSON can be scripted).
        `finish_reason` defaults to "tool_calls" when there are tool calls, else "stop".
        `usage` is `(prompt_tokens, completion_tokens)`; default counts whitespace words.
        `delay_seconds` holds the response back, for timeout and cancellation tests.
        """
        self._script.push(
            _Reply(text, tuple(dict(c) for c in tool_calls), finish_reason, usage, delay_seconds)
        )

    def queue_error(
        self,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        delay_seconds: float = 0.0,
    ) -> None:
        """Script the next response as an HTTP error.

        The body is `{"error": {"message", "type", "code"}}` as the real API sends, unless `body`
        is given: a dict is sent as JSON, a str as text/plain (as a misconfigured proxy would).
        """
        if body is None:
            body = {
                "error": {
                    "message": message or f"scripted error {status}",
                    "type": error_type or _default_error_type(status),
                    "code": code,
                }
            }
        self.queue_raw(status, body, headers=headers, delay_seconds=delay_seconds)

    def queue_raw(
        self,
        status: int,
        body: Any,
        *,
        headers: Mapping[str, str] | None = None,
        delay_seconds: float = 0.0,
    ) -> None:
        """Script the next response verbatim: a dict body as JSON, a str as text/plain.

        For servers that bend the format, e.g. a 200 whose tool calls lack `id` and `type`.
        """
        self._script.push(_Raw(status, body, dict(headers or {}), delay_seconds))


class FakeOpenAIServer(_ScriptingApi):
    """The server in the current event loop: `async with FakeOpenAIServer() as server:`."""

    def __init__(self, *, api_key: str | None = None, model: str = "fake-model") -> None:
        self._script = _Script()
        self._port = None
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None
        self._api_key = api_key
        self._model = model

    async def start(self) -> None:
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        # Bind the socket ourselves: port 0 gets a free ephemeral port, and the socket tells us
        # which one (aiohttp's TCPSite does not expose it publicly).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self._port = sock.getsockname()[1]

    async def close(self) -> None:
        if self._closing is not None:
            # End scripted delays now: aiohttp does not cancel a handler whose client has gone,
            # and a 30 s delay must not outlive the test that scripted it.
            self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._port = None

    async def __aenter__(self) -> FakeOpenAIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization")
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error_response(400, "request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return _error_response(400, "request body must be an object", "invalid_request_error")
        headers = {name.lower(): value for name, value in request.headers.items()}
        self._script.record(body, headers)
        # Auth is checked after recording so a test can see what a rejected request carried,
        # and before popping so a rejected request does not eat the script.
        if not authorization or not authorization.startswith("Bearer "):
            return _error_response(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                "invalid_request_error",
            )
        if self._api_key is not None and authorization != f"Bearer {self._api_key}":
            return _error_response(
                401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
            )
        if body.get("stream"):
            # Streaming is not scripted yet; fail loudly rather than answer in the wrong format.
            return _error_response(400, "the fake server does not stream", "invalid_request_error")
        scripted = self._script.pop()
        if scripted is None:
            scripted = _Reply(f"echo: {_last_user_text(body)}", (), None, None, 0.0)
        if scripted.delay_seconds and await self._closed_during(scripted.delay_seconds):
            return _error_response(503, "the fake server is shutting down", "server_error")
        if isinstance(scripted, _Raw):
            if isinstance(scripted.body, str):
                return web.Response(
                    status=scripted.status, text=scripted.body, headers=scripted.headers
                )
            return web.json_response(
                scripted.body, status=scripted.status, headers=scripted.headers
            )
        return web.json_response(self._completion(body, scripted))

    async def _closed_during(self, seconds: float) -> bool:
        assert self._closing is not None
        try:
            await asyncio.wait_for(self._closing.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def _completion(self, body: dict[str, Any], reply: _Reply) -> dict[str, Any]:
        number = self._script.next_id()
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id") or f"call_{number}_{index}",
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": _arguments_text(call.get("arguments", "{}")),
                    },
                }
                for index, call in enumerate(reply.tool_calls)
            ]
        finish_reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        if reply.usage is not None:
            prompt_tokens, completion_tokens = reply.usage
        else:
            prompt_tokens = sum(_word_count(m.get("content")) for m in body.get("messages", ()))
            completion_tokens = _word_count(reply.text)
        return {
            "id": f"chatcmpl-fake{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self._model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class FakeOpenAIServerThread(_ScriptingApi):
    """The server on its own event loop in a daemon thread: `with FakeOpenAIServerThread() as s:`.

    For tests whose model client lives in another process, or in sync code. Scripting methods
    may be called from any thread.
    """

    def __init__(self, *, api_key: str | None = None, model: str = "fake-model") -> None:
        self._server = FakeOpenAIServer(api_key=api_key, model=model)
        self._script = self._server._script
        self._port = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> None:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_serve_forever, args=(loop,), name="fake-openai-server", daemon=True
        )
        self._thread.start()
        self._loop = loop
        asyncio.run_coroutine_threadsafe(self._server.start(), loop).result(timeout)
        self._port = self._server._port

    def stop(self, timeout: float = 10.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._server.close(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            self._loop = self._thread = None
            self._port = None

    def __enter__(self) -> FakeOpenAIServerThread:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _serve_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        # Whatever aiohttp left behind (a handler of a dropped connection) is cancelled and
        # awaited here, so closing the loop does not warn about destroyed pending tasks.
        leftovers = asyncio.all_tasks(loop)
        for task in leftovers:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


def _error_response(
    status: int, message: str, error_type: str, code: str | None = None
) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": error_type, "code": code}}, status=status
    )


def _default_error_type(status: int) -> str:
    if status == 401:
        return "invalid_request_error"
    if status == 429:
        return "rate_limit_exceeded"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or ()):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _word_count(content: Any) -> int:
    return len(content.split()) if isinstance(content, str) else 0
