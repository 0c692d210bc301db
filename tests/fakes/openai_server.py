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

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from tests.fakes._llm_fake import LlmServer, Reply, ScriptingApi, ServerThread, slices, words


class _OpenAIScripting(ScriptingApi):
    """The methods tests call; shared by the in-loop and the thread runner."""

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, the value for `Model.spec.endpoint`."""
        return f"{self.root_url}/v1"

    @property
    def authorizations(self) -> list[str | None]:
        """Each request's Authorization header (None when absent), parallel to `requests`."""
        return [h.get("authorization") for h in self.request_headers]

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
        self._queue_reply(
            text,
            tool_calls,
            stop=finish_reason,
            usage=usage,
            delay_seconds=delay_seconds,
            chunks=chunks,
            cut_after=cut_after,
            first_chunk_delay_seconds=first_chunk_delay_seconds,
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

    def queue_context_overflow(self, tokens: int = 130512, limit: int = 128000) -> None:
        """Script the next response as the API's refusal of a prompt over the context window."""
        self.queue_raw(
            400,
            {
                "error": {
                    "message": f"This model's maximum context length is {limit} tokens. "
                    f"However, your messages resulted in {tokens} tokens. Please reduce the "
                    "length of the messages.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        )


class FakeOpenAIServer(LlmServer, _OpenAIScripting):
    """The server in the current event loop: `async with FakeOpenAIServer() as server:`."""

    _not_json = "request body is not JSON"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        model: str = "fake-model",
        api_keys: Sequence[str] | None = None,
        reject_stream_options: bool = False,
    ) -> None:
        super().__init__()
        keys = [*(api_keys or ()), *([api_key] if api_key else [])]
        self._api_keys = frozenset(f"Bearer {key}" for key in keys) if keys else None
        self._model = model
        self._reject_stream_options = reject_stream_options

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._serve)
        app.router.add_get("/v1/models", self._models)

    async def _models(self, request: web.Request) -> web.Response:
        """`GET /v1/models` (what `goondan doctor --online` calls): the key check alone."""
        headers = {name.lower(): value for name, value in request.headers.items()}
        refusal = self._refuse({}, headers)
        if refusal is not None:
            return refusal
        return web.json_response({"object": "list", "data": [{"id": self._model}]})

    def _bad_request(self, message: str) -> web.Response:
        return _error_response(400, message, "invalid_request_error")

    def _refuse(self, body: dict[str, Any], headers: dict[str, str]) -> web.Response | None:
        authorization = headers.get("authorization")
        if not authorization or not authorization.startswith("Bearer "):
            return _error_response(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                "invalid_request_error",
            )
        if self._api_keys is not None and authorization not in self._api_keys:
            return _error_response(
                401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
            )
        if self._reject_stream_options and "stream_options" in body:
            # As some OpenAI-compatible servers (older vLLM, some gateways) answer it.
            return _error_response(
                400,
                "Unrecognized request argument supplied: stream_options",
                "invalid_request_error",
                None,
            )
        return None

    def _shutting_down(self) -> web.Response:
        return _error_response(503, "the fake server is shutting down", "server_error")

    def _last_user_text(self, body: dict[str, Any]) -> str:
        for message in reversed(body.get("messages") or ()):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                    return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        return ""

    async def _answer(
        self, request: web.Request, body: dict[str, Any], reply: Reply
    ) -> web.StreamResponse:
        if body.get("stream"):
            return await self._stream_sse(
                request,
                self._chunk_events(body, reply),
                cut_after=reply.cut_after,
                first_delay=reply.first_chunk_delay_seconds,
            )
        return web.json_response(self._completion(body, reply))

    def _calls(self, reply: Reply, number: int) -> list[dict[str, Any]]:
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

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
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

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        number = self._script.next_id()
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = self._calls(reply, number)
        finish_reason = reply.stop or ("tool_calls" if reply.tool_calls else "stop")
        return {
            "id": f"chatcmpl-fake{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self._model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": self._usage(body, reply),
        }

    def _chunk_events(self, body: dict[str, Any], reply: Reply) -> list[bytes]:
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
        pieces = reply.chunks if reply.chunks is not None else words(reply.text or "")
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
                for piece in slices(function["arguments"], 7)
            ]
        finish_reason = reply.stop or ("tool_calls" if reply.tool_calls else "stop")
        chunks.append(chunk({}, finish_reason))
        if include_usage:
            chunks.append({**base, "choices": [], "usage": self._usage(body, reply)})
        events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
        return [*events, b"data: [DONE]\n\n"]


class FakeOpenAIServerThread(ServerThread, _OpenAIScripting):
    """The server on its own event loop in a daemon thread: `with FakeOpenAIServerThread() as s:`,
    for a model client in another process, or in sync code."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        model: str = "fake-model",
        api_keys: Sequence[str] | None = None,
        reject_stream_options: bool = False,
    ) -> None:
        super().__init__(
            FakeOpenAIServer(
                api_key=api_key,
                model=model,
                api_keys=api_keys,
                reject_stream_options=reject_stream_options,
            ),
            "fake-openai-server",
        )


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


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _word_count(content: Any) -> int:
    return len(content.split()) if isinstance(content, str) else 0
