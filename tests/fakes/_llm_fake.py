"""What the scripted model API fakes (`openai_server`, `anthropic_server`) share; each of those
keeps only its wire format.

Here: the script (a queue of responses, filled by the test, popped per request) and the record of
requests; the scripting methods every fake has (`queue_raw`, `requests`, `pending`...); the
request flow of the in-loop server (parse, record, refuse, pop, delay, answer), with scripted
delays that end when the server closes and SSE streaming that can be cut mid-body; and the runner
that serves a fake from its own event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web

from tests.fakes._http_fake import LoopbackServer


@dataclass(frozen=True)
class Reply:
    """A scripted successful answer, in wire-neutral terms."""

    text: str | None
    tool_calls: tuple[dict[str, Any], ...] = ()
    stop: str | None = None  # finish_reason / stop_reason; None: what the reply implies
    usage: tuple[int, int] | None = None  # (input, output) tokens; None: counted words
    delay_seconds: float = 0.0
    chunks: tuple[str, ...] | None = None  # streaming: the text deltas
    cut_after: int | None = None  # streaming: drop the connection after this many events
    first_chunk_delay_seconds: float = 0.0  # streaming: headers at once, first event later
    stream_error: tuple[str, str] | None = None  # streaming: (type, message) sent at cut_after
    thinking: tuple[str, str] | None = None  # Anthropic: (thinking text, signature) block first
    cache_usage: tuple[int, int] | None = None  # Anthropic: (cache creation, cache read) tokens


@dataclass(frozen=True)
class Raw:
    """A scripted response sent verbatim."""

    status: int
    body: Any  # dict -> JSON, str -> text/plain
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0

    def response(self) -> web.Response:
        if isinstance(self.body, str):
            return web.Response(status=self.status, text=self.body, headers=self.headers)
        return web.json_response(self.body, status=self.status, headers=self.headers)


class Script:
    """The queue of responses and the record of requests, shared by a server and its runner.

    Guarded by a threading lock because in the thread runner the test thread queues while the
    server thread pops.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Reply | Raw] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._times: list[float] = []
        self._ids = itertools.count(1)

    def push(self, item: Reply | Raw) -> None:
        with self._lock:
            self._queue.append(item)

    def record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            self._times.append(time.monotonic())

    def pop(self) -> Reply | Raw | None:
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


class ScriptingApi:
    """The scripting methods every fake has, for the in-loop server and the thread runner alike.

    A fake's own scripting class adds `base_url`, `queue_reply` and `queue_error` in its API's
    words.
    """

    _script: Script

    @property
    def root_url(self) -> str:
        raise NotImplementedError

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
        self._script.push(Raw(status, body, dict(headers or {}), delay_seconds))

    def _queue_reply(
        self,
        text: str | None,
        tool_calls: Sequence[Mapping[str, Any]],
        *,
        stop: str | None,
        usage: tuple[int, int] | None,
        delay_seconds: float,
        chunks: Sequence[str] | None,
        cut_after: int | None,
        first_chunk_delay_seconds: float,
        stream_error: tuple[str, str] | None = None,
        thinking: tuple[str, str] | None = None,
        cache_usage: tuple[int, int] | None = None,
    ) -> None:
        if chunks is not None and text is None:
            text = "".join(chunks)
        self._script.push(
            Reply(
                text,
                tuple(dict(c) for c in tool_calls),
                stop,
                usage,
                delay_seconds,
                tuple(chunks) if chunks is not None else None,
                cut_after,
                first_chunk_delay_seconds,
                stream_error,
                thinking,
                cache_usage,
            )
        )


class LlmServer(LoopbackServer):
    """A fake in the current event loop: `async with` it. The request flow is here; a fake says
    its wire format through the hooks below."""

    _script: Script
    _not_json = "request body is not valid JSON"  # the 400 message for a body that is not JSON

    def __init__(self) -> None:
        super().__init__()
        self._script = Script()
        self._closing: asyncio.Event | None = None

    # --- the hooks -----------------------------------------------------------------------------

    def _bad_request(self, message: str) -> web.Response:
        """The API's 400 for a malformed request."""
        raise NotImplementedError

    def _refuse(self, body: dict[str, Any], headers: dict[str, str]) -> web.Response | None:
        """The API's refusal of a recorded request (auth, validation), or None to answer it."""
        raise NotImplementedError

    def _last_user_text(self, body: dict[str, Any]) -> str:
        """The text of the last user message, for the default `echo:` reply."""
        raise NotImplementedError

    def _shutting_down(self) -> web.Response:
        """The answer to a request whose scripted delay the server's closing cut short."""
        raise NotImplementedError

    async def _answer(
        self, request: web.Request, body: dict[str, Any], reply: Reply
    ) -> web.StreamResponse:
        """`reply` as JSON, or as an SSE stream (`self._stream_sse`) if the request asks."""
        raise NotImplementedError

    # --- the flow ------------------------------------------------------------------------------

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return self._bad_request(self._not_json)
        if not isinstance(body, dict):
            return self._bad_request("request body must be an object")
        headers = {name.lower(): value for name, value in request.headers.items()}
        self._script.record(body, headers)
        # Refusals come after recording so a test can see what a rejected request carried, and
        # before popping so a rejected request does not eat the script.
        refusal = self._refuse(body, headers)
        if refusal is not None:
            return refusal
        scripted = self._script.pop()
        if scripted is None:
            scripted = Reply(f"echo: {self._last_user_text(body)}")
        if scripted.delay_seconds and await self._closed_during(scripted.delay_seconds):
            return self._shutting_down()
        if isinstance(scripted, Raw):
            return scripted.response()
        return await self._answer(request, body, scripted)

    async def start(self) -> None:
        self._closing = asyncio.Event()
        await super().start()

    async def close(self) -> None:
        if self._closing is not None:
            # End scripted delays now: aiohttp does not cancel a handler whose client has gone,
            # and a 30 s delay must not outlive the test that scripted it.
            self._closing.set()
        await super().close()

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


class ServerThread(ScriptingApi):
    """Runs an `LlmServer` on its own event loop in a daemon thread: `with Runner() as server:`.

    For tests whose model client lives in another process, or in sync code. Scripting methods
    may be called from any thread.
    """

    def __init__(self, server: LlmServer, name: str) -> None:
        self._server = server
        self._script = server._script
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def root_url(self) -> str:
        return self._server.root_url

    def start(self, timeout: float = 10.0) -> None:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_serve_forever, args=(loop,), name=self._name, daemon=True
        )
        self._thread.start()
        self._loop = loop
        self._run(self._server.start(), timeout)

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

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self, coroutine: Coroutine[Any, Any, None], timeout: float) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)


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


def words(text: str) -> list[str]:
    """`text` in stream-sized pieces: each word with the whitespace after it."""
    return re.findall(r"\s*\S+\s*", text) if text.strip() else ([text] if text else [])


def slices(text: str, size: int) -> list[str]:
    """`text` in pieces of `size` characters (one empty piece for an empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
