"""A scripted Anthropic Messages API server on 127.0.0.1, speaking the real wire format.

The same two runners and scripting style as `FakeOpenAIServer`:

    async with FakeAnthropicServer() as server:
        server.queue_reply(tool_calls=[{"name": "bash", "arguments": {"cmd": "ls"}}])
        server.queue_error(529, "Overloaded")
        ...  # Model.spec.endpoint = server.base_url, provider: anthropic

    with FakeAnthropicServerThread() as server:  # for another process, or sync code
        ...

`POST /v1/messages` needs an API key, in `x-api-key` or as `Authorization: Bearer` (which newer
SDKs send): 401 `authentication_error` without one; pass `api_key=` to require that exact key.
It needs `anthropic-version` too, and checks the body as the real API does where it matters to
an adapter: `max_tokens` present, roles `user`/`assistant`, no empty
text blocks, tool-use ids of the allowed characters, and every `tool_use` answered by a
`tool_result` in the very next message (and no `tool_result` without its `tool_use`). A bad body
gets 400 `invalid_request_error` with a message like the real one.

It answers with the next scripted response; with none queued, `"echo: <last user text>"`. A
request with `"stream": true` gets an SSE event stream: `message_start`, `ping`, per content
block `content_block_start` / `content_block_delta` (`text_delta`, or `input_json_delta` for a
`tool_use`) / `content_block_stop`, `message_delta` (stop_reason and usage), `message_stop`.
Errors are `{"type": "error", "error": {"type", "message"}}`, in a body or as an `error` event
mid-stream (e.g. `overloaded_error`).

Requests, headers and arrival times are recorded as in the OpenAI fake.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from tests.fakes._llm_fake import LlmServer, Reply, ScriptingApi, ServerThread, slices, words

_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class _AnthropicScripting(ScriptingApi):
    """The methods tests call; shared by the in-loop and the thread runner."""

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT`, the value for `Model.spec.endpoint` (the SDK adds `/v1`)."""
        return self.root_url

    @property
    def api_keys(self) -> list[str | None]:
        """Each request's API key (None when absent), parallel to `requests`."""
        return [_api_key(h) for h in self.request_headers]

    def queue_reply(
        self,
        text: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] = (),
        *,
        stop_reason: str | None = None,
        usage: tuple[int, int] | None = None,
        delay_seconds: float = 0.0,
        chunks: Sequence[str] | None = None,
        cut_after: int | None = None,
        first_chunk_delay_seconds: float = 0.0,
        stream_error: tuple[str, str] | None = None,
        thinking: tuple[str, str] | None = None,
        cache_usage: tuple[int, int] | None = None,
    ) -> None:
        """Script the next message (JSON, or an SSE stream if the request asks).

        `tool_calls` items are `{"name": str, "arguments": dict | str, "id"?: str}`; a str
        `arguments` is sent in `input_json_delta` pieces as is when streaming (so malformed JSON
        can be scripted) and must be valid JSON otherwise. `stop_reason` defaults to "tool_use"
        with tool calls, else "end_turn". `usage` is `(input_tokens, output_tokens)`.
        Streaming only: `chunks` are the text deltas; `cut_after=N` sends N events, then drops
        the connection, or, with `stream_error=(type, message)`, sends that `error` event.
        `first_chunk_delay_seconds` sends the headers at once and the first event that late.
        `thinking=(text, signature)` leads the message with a `thinking` block (streamed as
        `thinking_delta`s and a `signature_delta`); `cache_usage=(creation, read)` adds
        `cache_creation_input_tokens` / `cache_read_input_tokens` to the usage.
        """
        if stream_error is not None and cut_after is None:
            raise ValueError("stream_error needs cut_after: the event count before the error")
        self._queue_reply(
            text,
            tool_calls,
            stop=stop_reason,
            usage=usage,
            delay_seconds=delay_seconds,
            chunks=chunks,
            cut_after=cut_after,
            first_chunk_delay_seconds=first_chunk_delay_seconds,
            stream_error=stream_error,
            thinking=thinking,
            cache_usage=cache_usage,
        )

    def queue_error(
        self,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        delay_seconds: float = 0.0,
    ) -> None:
        """Script the next response as an HTTP error, `{"type": "error", "error": {...}}`
        unless `body` is given (a dict as JSON, a str as text/plain). 529 is `overloaded_error`,
        429 `rate_limit_error` (add `headers={"retry-after": "2"}` as the API does)."""
        if body is None:
            body = _error_body(
                error_type or _ERROR_TYPES.get(status, "api_error"),
                message or f"scripted error {status}",
            )
        self.queue_raw(status, body, headers=headers, delay_seconds=delay_seconds)

    def queue_context_overflow(self, tokens: int = 210000, limit: int = 200000) -> None:
        """Script the next response as the API's refusal of a prompt over the context window."""
        self.queue_raw(
            400,
            _error_body(
                "invalid_request_error", f"prompt is too long: {tokens} tokens > {limit} maximum"
            ),
        )


class FakeAnthropicServer(LlmServer, _AnthropicScripting):
    """The server in the current event loop: `async with FakeAnthropicServer() as server:`."""

    def __init__(self, *, api_key: str | None = None, validate: bool = True) -> None:
        super().__init__()
        self._api_key = api_key
        self._validate = validate

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._serve)
        app.router.add_get("/v1/models", self._models)

    async def _models(self, request: web.Request) -> web.Response:
        """`GET /v1/models` (what `goondan doctor --online` calls): key and version checks."""
        headers = {name.lower(): value for name, value in request.headers.items()}
        key = _api_key(headers)
        if not key:
            return _error(401, "authentication_error", "x-api-key header is required")
        if self._api_key is not None and key != self._api_key:
            return _error(401, "authentication_error", "invalid x-api-key")
        if "anthropic-version" not in headers:
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        return web.json_response({"data": [{"id": "claude-fake", "type": "model"}]})

    def _bad_request(self, message: str) -> web.Response:
        return _error(400, "invalid_request_error", message)

    def _refuse(self, body: dict[str, Any], headers: dict[str, str]) -> web.Response | None:
        key = _api_key(headers)
        if not key:
            return _error(401, "authentication_error", "x-api-key header is required")
        if self._api_key is not None and key != self._api_key:
            return _error(401, "authentication_error", "invalid x-api-key")
        if "anthropic-version" not in headers:
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        problem = _check_body(body) if self._validate else None
        return None if problem is None else _error(400, "invalid_request_error", problem)

    def _shutting_down(self) -> web.Response:
        return _error(529, "overloaded_error", "the fake server is shutting down")

    def _last_user_text(self, body: dict[str, Any]) -> str:
        for message in reversed(body.get("messages") or ()):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):
                    texts = [b.get("text", "") for b in content if isinstance(b, dict)]
                    return " ".join(t for t in texts if t)
        return ""

    async def _answer(
        self, request: web.Request, body: dict[str, Any], reply: Reply
    ) -> web.StreamResponse:
        number = self._script.next_id()
        if body.get("stream"):
            events = self._events(body, reply, number)
            cut_after = reply.cut_after
            if reply.stream_error is not None and cut_after is not None:
                kind, message = reply.stream_error
                events = [*events[:cut_after], _sse("error", _error_body(kind, message))]
                cut_after = None
            return await self._stream_sse(
                request,
                events,
                cut_after=cut_after,
                first_delay=reply.first_chunk_delay_seconds,
            )
        try:
            return web.json_response(self._message(body, reply, number))
        except ValueError as exc:
            return _error(500, "api_error", f"fake server script error: {exc}")

    def _message(self, body: dict[str, Any], reply: Reply, number: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.thinking:
            thought, signature = reply.thinking
            content.append({"type": "thinking", "thinking": thought, "signature": signature})
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for index, call in enumerate(reply.tool_calls):
            arguments = call.get("arguments", {})
            if isinstance(arguments, str):
                arguments = json.loads(arguments)  # ValueError: malformed needs streaming
            content.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or f"toolu_fake{number}_{index}",
                    "name": call["name"],
                    "input": arguments,
                }
            )
        input_tokens, output_tokens = self._usage(body, reply)
        return {
            "id": f"msg_fake{number}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": _stop_reason(reply),
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                **_cache_usage(reply),
            },
        }

    def _events(self, body: dict[str, Any], reply: Reply, number: int) -> list[bytes]:
        input_tokens, output_tokens = self._usage(body, reply)
        events = [
            _sse(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": f"msg_fake{number}",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model"),
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {
                            "input_tokens": input_tokens,
                            "output_tokens": 1,
                            **_cache_usage(reply),
                        },
                    },
                },
            ),
            _sse("ping", {"type": "ping"}),
        ]
        index = 0
        if reply.thinking:
            thought, signature = reply.thinking
            events.append(
                _block_start(index, {"type": "thinking", "thinking": "", "signature": ""})
            )
            events += [
                _block_delta(index, {"type": "thinking_delta", "thinking": piece})
                for piece in words(thought)
            ]
            events.append(_block_delta(index, {"type": "signature_delta", "signature": signature}))
            events.append(_block_stop(index))
            index += 1
        if reply.text:
            pieces = reply.chunks if reply.chunks is not None else words(reply.text)
            events.append(_block_start(index, {"type": "text", "text": ""}))
            events += [
                _block_delta(index, {"type": "text_delta", "text": piece}) for piece in pieces
            ]
            events.append(_block_stop(index))
            index += 1
        for position, call in enumerate(reply.tool_calls):
            arguments = call.get("arguments", {})
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            block = {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_fake{number}_{position}",
                "name": call["name"],
                "input": {},
            }
            events.append(_block_start(index, block))
            # The real API opens with an empty partial_json, then sends the JSON in pieces.
            pieces = ["", *slices(arguments, 6)] if arguments else [""]
            events += [
                _block_delta(index, {"type": "input_json_delta", "partial_json": piece})
                for piece in pieces
            ]
            events.append(_block_stop(index))
            index += 1
        events.append(
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            )
        )
        events.append(_sse("message_stop", {"type": "message_stop"}))
        return events

    def _usage(self, body: dict[str, Any], reply: Reply) -> tuple[int, int]:
        if reply.usage is not None:
            return reply.usage
        words = _words_in(body.get("system"))
        for message in body.get("messages") or ():
            if isinstance(message, dict):
                words += _words_in(message.get("content"))
        return words, _words_in(reply.text)


class FakeAnthropicServerThread(ServerThread, _AnthropicScripting):
    """The server on its own event loop in a daemon thread:
    `with FakeAnthropicServerThread() as server:`, for a model client in another process, or in
    sync code."""

    def __init__(self, *, api_key: str | None = None, validate: bool = True) -> None:
        super().__init__(
            FakeAnthropicServer(api_key=api_key, validate=validate), "fake-anthropic-server"
        )


def _api_key(headers: Mapping[str, str]) -> str | None:
    """The key from `x-api-key`, or from `Authorization: Bearer` (which newer SDKs send and the
    API also accepts)."""
    key = headers.get("x-api-key")
    if key:
        return key
    authorization = headers.get("authorization", "")
    return authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None


def _check_body(body: dict[str, Any]) -> str | None:
    """The request checks of the real API that an adapter can get wrong; None when fine."""
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for tool_index, tool in enumerate(body.get("tools") or ()):
        if not isinstance(tool, dict) or "name" not in tool or "input_schema" not in tool:
            return f"tools.{tool_index}: name and input_schema are required"
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: Input should be a valid string or list of text blocks"
    breakpoints = _cache_controls(body)
    if breakpoints > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
    thinking_on = (body.get("thinking") or {}).get("type") == "enabled"
    pending: list[str] = []  # tool_use ids of the previous assistant message
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{n}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{n}: all messages must have non-empty content"
        uses: list[str] = []
        results: list[str] = []
        for b, block in enumerate(blocks):
            kind = block.get("type") if isinstance(block, dict) else None
            where = f"messages.{n}.content.{b}"
            if kind == "text":
                if not isinstance(block.get("text"), str) or not block["text"].strip():
                    return f"{where}: text content blocks must contain non-whitespace text"
            elif kind == "tool_use":
                if message["role"] != "assistant":
                    return f"{where}: tool_use blocks are only allowed in assistant messages"
                if not _TOOL_ID.match(str(block.get("id", ""))):
                    return f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                if not isinstance(block.get("input"), dict):
                    return f"{where}.tool_use.input: Input should be a valid dictionary"
                uses.append(block["id"])
            elif kind == "tool_result":
                if message["role"] != "user":
                    return f"{where}: tool_result blocks are only allowed in user messages"
                results.append(str(block.get("tool_use_id")))
            elif kind in ("thinking", "redacted_thinking"):
                if message["role"] != "assistant":
                    return f"{where}: thinking blocks are only allowed in assistant messages"
                if kind == "thinking" and not isinstance(block.get("signature"), str):
                    return f"{where}.thinking.signature: Field required"
                if "cache_control" in block:
                    return f"{where}: thinking blocks cannot be cached with cache_control"
            else:
                return f"{where}.type: unknown content block type {kind!r}"
        missing = [i for i in pending if i not in results]
        if missing:
            return (
                f"messages.{n}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        unexpected = [i for i in results if i not in pending]
        if unexpected:
            return (
                f"messages.{n}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(unexpected)}. Each `tool_result` block must have a corresponding "
                "`tool_use` block in the previous message."
            )
        pending = uses
        last_assistant = n == len(messages) - 2 and message["role"] == "assistant"
        if (
            thinking_on
            and last_assistant
            and uses
            and blocks[0].get("type")
            not in (
                "thinking",
                "redacted_thinking",
            )
        ):
            return (
                f"messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                f"found `{blocks[0].get('type')}`. When `thinking` is enabled, a final "
                "`assistant` message must start with a thinking block (preceeding the "
                "lastmost set of `tool_use` and `tool_result` blocks)."
            )
    if pending:
        return (
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {', '.join(pending)}"
        )
    return None


def _cache_controls(body: dict[str, Any]) -> int:
    blocks: list[Any] = []
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    blocks += body.get("tools") or []
    for message in body.get("messages") or ():
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            blocks += message["content"]
    return sum(1 for block in blocks if isinstance(block, dict) and "cache_control" in block)


def _cache_usage(reply: Reply) -> dict[str, int]:
    if reply.cache_usage is None:
        return {}
    created, read = reply.cache_usage
    return {"cache_creation_input_tokens": created, "cache_read_input_tokens": read}


def _stop_reason(reply: Reply) -> str:
    return reply.stop or ("tool_use" if reply.tool_calls else "end_turn")


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return _sse(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def _block_delta(index: int, delta: dict[str, Any]) -> bytes:
    return _sse(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def _block_stop(index: int) -> bytes:
    return _sse("content_block_stop", {"type": "content_block_stop", "index": index})


def _error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(_error_body(kind, message), status=status)


def _words_in(content: Any) -> int:
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):
        total = 0
        for block in content:
            if isinstance(block, dict):
                for key in ("text", "content"):
                    total += _words_in(block.get(key))
        return total
    return 0
