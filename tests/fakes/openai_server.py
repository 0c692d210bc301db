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
`"echo: <last user message>"`. A request with `"stream": true` gets the scripted reply as an SSE
stream, as the real API sends it: `data: {chat.completion.chunk}` events whose
`choices[0].delta` carries the role, then the text in pieces, then each tool call (id, type and
name in its first delta, the arguments in pieces, all keyed by `index`), then a chunk with the
`finish_reason`, a usage chunk with empty `choices` when `stream_options.include_usage` was
asked for, and `data: [DONE]`. A reply can cut the stream after some events (the connection is
dropped mid-body) or hold back its first event.

Every request's JSON body lands in `server.requests`, its headers in `server.request_headers`
(the Authorization header also in `server.authorizations`) and its arrival time in
`server.request_times`. A request without an Authorization header gets 401, as from the real
API; pass `api_key=` to also require that exact key.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from aiohttp import web


@dataclass(frozen=True)
class _Reply:
    text: str | None
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str | None
    usage: tuple[int, int] | None
    delay_seconds: float
    chunks: tuple[str, ...] | None = None  # streaming: the text deltas
    cut_after: int | None = None  # streaming: drop the connection after this many events
    first_chunk_delay_seconds: float = 0.0  # streaming: headers at once, first event later


@dataclass(frozen=True)
class _Raw:
    status: int
    body: Any  # dict -> JSON, str -> text/plain
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0


Item = TypeVar("Item")


class _Script(Generic[Item]):
    """What both runners share: the queue of responses and the record of requests.

    Guarded by a threading lock because in the thread runner the test thread queues while the
    server thread pops.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Item] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._times: list[float] = []
        self._ids = itertools.count(1)

    def push(self, item: Item) -> None:
        with self._lock:
            self._queue.append(item)

    def record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            self._times.append(time.monotonic())

    def pop(self) -> Item | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, str]], int]:
        with self._lock:
            return list(self._requests), list(self._headers), len(self._queue)

    def times(self) -> list[float]:
        with self._lock:
            return list(self._times)


class _Recorded:
    """The read side of the scripting API, shared by every fake server and runner."""

    _script: _Script[Any]

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of every JSON request body received so far, oldest first."""
        return self._script.snapshot()[0]

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Each request's HTTP headers, names lower-cased, parallel to `requests`."""
        return self._script.snapshot()[1]

    @property
    def request_times(self) -> list[float]:
        """Each request's arrival, `time.monotonic()` seconds, parallel to `requests`."""
        return self._script.times()

    @property
    def pending(self) -> int:
        """How many scripted responses have not been served yet."""
        return self._script.snapshot()[2]


class _ScriptingApi(_Recorded):
    """The methods tests call; shared by the in-loop and the thread runner."""

    _port: int | None

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, the value for `Model.spec.endpoint`."""
        if self._port is None:
            raise RuntimeError("the fake OpenAI server is not running")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def authorizations(self) -> list[str | None]:
        """Each request's Authorization header (None when absent), parallel to `requests`."""
        return [h.get("authorization") for h in self._script.snapshot()[1]]

    def queue_reply(
        self,
        text: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] = (),
        *,
        finish_reason: str | None = None,
        usage: tuple[int, int] | None = None,
        delay_seconds: float = 0.0,
        chunks: Sequence[str] | None = None,
        cut_after: int | None = None,
        first_chunk_delay_seconds: float = 0.0,
    ) -> None:
        """Script the next successful completion (JSON, or an SSE stream if the request asks).

        `tool_calls` items are `{"name": str, "arguments": str | dict, "id"?: str}`; a dict
        `arguments` is JSON-encoded, a str is sent as is (so malformed JSON can be scripted).
        `finish_reason` defaults to "tool_calls" when there are tool calls, else "stop".
        `usage` is `(prompt_tokens, completion_tokens)`; default counts whitespace words.
        `delay_seconds` holds the response back, for timeout and cancellation tests.
        Streaming only: `chunks` are the text deltas (default: `text` split after each word,
        joining to `text`); `cut_after=N` sends N `data:` events, then drops the connection;
        `first_chunk_delay_seconds` sends the headers at once and the first event that late.
        """
        if chunks is not None and text is None:
            text = "".join(chunks)
        self._script.push(
            _Reply(
                text,
                tuple(dict(c) for c in tool_calls),
                finish_reason,
                usage,
                delay_seconds,
                tuple(chunks) if chunks is not None else None,
                cut_after,
                first_chunk_delay_seconds,
            )
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


class _AioServer:
    """An aiohttp app on an ephemeral 127.0.0.1 port, with delays that end when it closes."""

    _port: int | None

    def __init__(self) -> None:
        self._port = None
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        self._closing = asyncio.Event()
        app = web.Application()
        self._routes(app)
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

    async def _closed_during(self, seconds: float) -> bool:
        assert self._closing is not None
        try:
            await asyncio.wait_for(self._closing.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _stream_sse(
        self,
        request: web.Request,
        events: Sequence[bytes],
        *,
        cut_after: int | None,
        first_delay: float,
    ) -> web.StreamResponse:
        """Send `events` (each a complete SSE event) as a text/event-stream response."""
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        if first_delay and await self._closed_during(first_delay):
            _drop(request)
            return response
        for number, event in enumerate(events):
            if cut_after is not None and number >= cut_after:
                _drop(request)
                return response
            try:
                await response.write(event)
            except ConnectionError:  # the client went away (e.g. its first-token timeout)
                return response
        try:
            await response.write_eof()
        except ConnectionError:
            pass
        return response


def _drop(request: web.Request) -> None:
    """Drop the connection mid-body: the client sees an incomplete chunked response."""
    transport = request.transport
    if transport is not None:
        transport.abort()


class FakeOpenAIServer(_ScriptingApi, _AioServer):
    """The server in the current event loop: `async with FakeOpenAIServer() as server:`."""

    def __init__(self, *, api_key: str | None = None, model: str = "fake-model") -> None:
        _AioServer.__init__(self)
        self._script: _Script[_Reply | _Raw] = _Script()
        self._api_key = api_key
        self._model = model

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat_completions)

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
        if body.get("stream"):
            return await self._stream_sse(
                request,
                self._chunk_events(body, scripted),
                cut_after=scripted.cut_after,
                first_delay=scripted.first_chunk_delay_seconds,
            )
        return web.json_response(self._completion(body, scripted))

    def _calls(self, reply: _Reply, number: int) -> list[dict[str, Any]]:
        return [
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

    def _usage(self, body: dict[str, Any], reply: _Reply) -> dict[str, int]:
        if reply.usage is not None:
            prompt_tokens, completion_tokens = reply.usage
        else:
            prompt_tokens = sum(_word_count(m.get("content")) for m in body.get("messages", ()))
            completion_tokens = _word_count(reply.text)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    def _completion(self, body: dict[str, Any], reply: _Reply) -> dict[str, Any]:
        number = self._script.next_id()
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = self._calls(reply, number)
        finish_reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        return {
            "id": f"chatcmpl-fake{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self._model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": self._usage(body, reply),
        }

    def _chunk_events(self, body: dict[str, Any], reply: _Reply) -> list[bytes]:
        number = self._script.next_id()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base: dict[str, Any] = {
            "id": f"chatcmpl-fake{number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or self._model,
        }

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            data = {
                **base,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            if include_usage:
                data["usage"] = None  # as the real API: null on every chunk but the last
            return data

        chunks = [chunk({"role": "assistant", "content": ""})]
        pieces = reply.chunks if reply.chunks is not None else _words(reply.text or "")
        chunks += [chunk({"content": piece}) for piece in pieces]
        for index, call in enumerate(self._calls(reply, number)):
            function = call["function"]
            chunks.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": function["name"], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            chunks += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _slices(function["arguments"], 7)
            ]
        finish_reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        chunks.append(chunk({}, finish_reason))
        if include_usage:
            chunks.append({**base, "choices": [], "usage": self._usage(body, reply)})
        events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
        return [*events, b"data: [DONE]\n\n"]


class _ServerThread:
    """Runs an `_AioServer` on its own event loop in a daemon thread."""

    _port: int | None

    def __init__(self, server: _AioServer, name: str) -> None:
        self._server = server
        self._name = name
        self._port = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> None:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_serve_forever, args=(loop,), name=self._name, daemon=True
        )
        self._thread.start()
        self._loop = loop
        self._run(self._server.start(), timeout)
        self._port = self._server._port

    def stop(self, timeout: float = 10.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._run(self._server.close(), timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            self._loop = self._thread = None
            self._port = None

    def _run(self, coroutine: Coroutine[Any, Any, None], timeout: float) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)


class FakeOpenAIServerThread(_ServerThread, _ScriptingApi):
    """The server on its own event loop in a daemon thread: `with FakeOpenAIServerThread() as s:`.

    For tests whose model client lives in another process, or in sync code. Scripting methods
    may be called from any thread.
    """

    def __init__(self, *, api_key: str | None = None, model: str = "fake-model") -> None:
        server = FakeOpenAIServer(api_key=api_key, model=model)
        _ServerThread.__init__(self, server, "fake-openai-server")
        self._script = server._script

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


def _words(text: str) -> list[str]:
    """`text` in stream-sized pieces: each word with the whitespace after it."""
    return re.findall(r"\s*\S+\s*", text) if text.strip() else ([text] if text else [])


def _slices(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
