"""A scripted Gemini API (Google AI, `v1beta`) server on 127.0.0.1, speaking the real wire format.

The same two runners and scripting style as the OpenAI and Anthropic fakes:

    async with FakeGoogleServer() as server:
        server.queue_reply(tool_calls=[{"name": "bash", "arguments": {"cmd": "ls"}}])
        server.queue_error(503, "The model is overloaded.")
        ...  # Model.spec.endpoint = server.base_url, provider: google

    with FakeGoogleServerThread() as server:  # for another process, or sync code
        ...

`POST /v1beta/models/{model}:generateContent` answers one `GenerateContentResponse` as JSON;
`POST /v1beta/models/{model}:streamGenerateContent?alt=sse` answers the same as an SSE stream of
`data: {GenerateContentResponse}` events: the text in pieces, then each `functionCall` whole
(Gemini never splits a call), the last event with `finishReason` and `usageMetadata`.
The key travels in `x-goog-api-key` (or `?key=`): 403 `PERMISSION_DENIED` without one, 400
`INVALID_ARGUMENT` "API key not valid" for a wrong one when `api_key=` (or `api_keys=`) is set.
The body is checked as the real API does where it matters to an adapter: `contents` present,
roles `user`/`model`, no empty parts, and each `functionCall` of a model turn answered by a
`functionResponse` of the same name in the next turn. Errors are
`{"error": {"code", "message", "status"}}`.

Requests (with the model name under `"_model"` and the method under `"_method"`), headers and
arrival times are recorded as in the other fakes.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from tests.fakes._llm_fake import LlmServer, Reply, ScriptingApi, ServerThread, words

_CALL: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("_CALL")

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class _GoogleScripting(ScriptingApi):
    """The methods tests call; shared by the in-loop and the thread runner."""

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT`, the value for `Model.spec.endpoint` (the SDK adds
        `/v1beta/models/...`)."""
        return self.root_url

    @property
    def api_keys(self) -> list[str | None]:
        """Each request's API key (None when absent), parallel to `requests`."""
        return [h.get("x-goog-api-key") for h in self.request_headers]

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
        """Script the next response (JSON, or SSE for `:streamGenerateContent`).

        `tool_calls` items are `{"name": str, "arguments": dict, "id"?: str,
        "thoughtSignature"?: str}`. `finish_reason` defaults to "STOP" (Gemini says STOP for
        function calls too). `usage` is `(promptTokenCount, candidatesTokenCount)`; default counts
        whitespace words. Streaming only: `chunks` are the text pieces; `cut_after=N` sends N
        events, then drops the connection.
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
        headers: Mapping[str, str] | None = None,
        delay_seconds: float = 0.0,
    ) -> None:
        """Script the next response as an HTTP error in Google's error format."""
        body = _error_body(status, message or f"scripted error {status}")
        self.queue_raw(status, body, headers=headers, delay_seconds=delay_seconds)


class FakeGoogleServer(LlmServer, _GoogleScripting):
    """The server in the current event loop: `async with FakeGoogleServer() as server:`."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_keys: Sequence[str] | None = None,
        validate: bool = True,
    ) -> None:
        super().__init__()
        keys = [*(api_keys or ()), *([api_key] if api_key else [])]
        self._api_keys = frozenset(keys) if keys else None
        self._validate = validate

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1beta/models/{call}", self._serve_call)
        app.router.add_get("/v1beta/models", self._models)

    async def _models(self, request: web.Request) -> web.Response:
        """`GET /v1beta/models` (what `goondan doctor --online` calls): the key check."""
        key = request.headers.get("x-goog-api-key")
        if not key:
            return _error(403, "Method doesn't allow unregistered callers")
        if self._api_keys is not None and key not in self._api_keys:
            return _error(400, "API key not valid. Please pass a valid API key.")
        return web.json_response({"models": [{"name": "models/gemini-fake"}]})

    async def _serve_call(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["call"].partition(":")
        if method not in ("generateContent", "streamGenerateContent"):
            return _error(404, f"method {method!r} is not found")
        if method == "streamGenerateContent" and request.query.get("alt") != "sse":
            return _error(400, "this fake streams only with alt=sse")
        # Each request is served in its own task: _refuse and _answer read these back.
        _CALL.set((model, method))
        return await self._serve(request)

    def _bad_request(self, message: str) -> web.Response:
        return _error(400, message)

    def _refuse(self, body: dict[str, Any], headers: dict[str, str]) -> web.Response | None:
        # The model and method are in the path; recorded with the body (the same dict) for the
        # tests to see.
        body["_model"], body["_method"] = _CALL.get()
        key = headers.get("x-goog-api-key")
        if not key:
            return _error(
                403,
                "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity.",
            )
        if self._api_keys is not None and key not in self._api_keys:
            return _error(400, "API key not valid. Please pass a valid API key.")
        problem = _check_body(body) if self._validate else None
        return None if problem is None else _error(400, problem)

    def _shutting_down(self) -> web.Response:
        return _error(503, "the fake server is shutting down")

    def _last_user_text(self, body: dict[str, Any]) -> str:
        for content in reversed(body.get("contents") or ()):
            if isinstance(content, dict) and content.get("role", "user") == "user":
                texts = [p.get("text", "") for p in content.get("parts") or () if "text" in p]
                if texts:
                    return " ".join(texts)
        return ""

    async def _answer(
        self, request: web.Request, body: dict[str, Any], reply: Reply
    ) -> web.StreamResponse:
        number = self._script.next_id()
        if body["_method"] == "streamGenerateContent":
            return await self._stream_sse(
                request,
                [_sse(event) for event in self._events(body, reply, number)],
                cut_after=reply.cut_after,
                first_delay=reply.first_chunk_delay_seconds,
            )
        return web.json_response(self._response(body, reply, number, reply.text, list_calls=True))

    def _response(
        self,
        body: dict[str, Any],
        reply: Reply,
        number: int,
        text: str | None,
        *,
        list_calls: bool,
        last: bool = True,
    ) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if text:
            parts.append({"text": text})
        if list_calls:
            for call in reply.tool_calls:
                part: dict[str, Any] = {
                    "functionCall": {
                        "name": call["name"],
                        "args": call.get("arguments", {}),
                        **({"id": call["id"]} if call.get("id") else {}),
                    }
                }
                if call.get("thoughtSignature"):
                    part["thoughtSignature"] = call["thoughtSignature"]
                parts.append(part)
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        response: dict[str, Any] = {
            "candidates": [candidate],
            "modelVersion": body.get("_model", "gemini-fake"),
            "responseId": f"resp_fake{number}",
        }
        if last:
            candidate["finishReason"] = reply.stop or "STOP"
            prompt, output = self._usage(body, reply)
            response["usageMetadata"] = {
                "promptTokenCount": prompt,
                "candidatesTokenCount": output,
                "totalTokenCount": prompt + output,
            }
        return response

    def _events(self, body: dict[str, Any], reply: Reply, number: int) -> list[dict[str, Any]]:
        pieces = list(reply.chunks) if reply.chunks is not None else words(reply.text or "")
        events = [
            self._response(body, reply, number, piece, list_calls=False, last=False)
            for piece in pieces
        ]
        # The calls and the finish come together in the last event, as Gemini sends them.
        events.append(self._response(body, reply, number, None, list_calls=True))
        return events

    def _usage(self, body: dict[str, Any], reply: Reply) -> tuple[int, int]:
        if reply.usage is not None:
            return reply.usage
        count = 0
        for content in [body.get("systemInstruction"), *(body.get("contents") or ())]:
            if isinstance(content, dict):
                for part in content.get("parts") or ():
                    count += len(str(part.get("text", "")).split())
        return count, len((reply.text or "").split())


class FakeGoogleServerThread(ServerThread, _GoogleScripting):
    """The server on its own event loop in a daemon thread."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_keys: Sequence[str] | None = None,
        validate: bool = True,
    ) -> None:
        super().__init__(
            FakeGoogleServer(api_key=api_key, api_keys=api_keys, validate=validate),
            "fake-google-server",
        )


def _check_body(body: dict[str, Any]) -> str | None:
    """The request checks of the real API that an adapter can get wrong; None when fine."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    for tool_index, tool in enumerate(body.get("tools") or ()):
        for decl in (tool or {}).get("functionDeclarations") or ():
            if not isinstance(decl, dict) or not decl.get("name"):
                return f"* GenerateContentRequest.tools[{tool_index}].function_declarations: name"
    pending: list[str] = []  # function names called by the previous model turn
    for n, content in enumerate(contents):
        role = content.get("role") if isinstance(content, dict) else None
        if role not in ("user", "model"):
            return f"Please use a valid role: user, model. (contents[{n}].role={role!r})"
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            return (
                f"* GenerateContentRequest.contents[{n}].parts: contents.parts must not be empty."
            )
        calls: list[str] = []
        answered: list[str] = []
        for p, part in enumerate(parts):
            if not isinstance(part, dict) or not part:
                return f"* GenerateContentRequest.contents[{n}].parts[{p}].data: required oneof"
            if "text" in part and not isinstance(part["text"], str):
                return f"contents[{n}].parts[{p}].text: must be a string"
            if "functionCall" in part:
                if role != "model":
                    return f"contents[{n}].parts[{p}]: functionCall is only allowed in model turns"
                calls.append(str(part["functionCall"].get("name")))
            if "functionResponse" in part:
                response = part["functionResponse"]
                if not isinstance(response.get("response"), dict):
                    return f"contents[{n}].parts[{p}].functionResponse.response: must be an object"
                answered.append(str(response.get("name")))
        if pending and sorted(pending) != sorted(answered):
            return (
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn."
            )
        if answered and not pending:
            return (
                "Please ensure that function response turn comes immediately after a function "
                "call turn."
            )
        pending = calls
    return None


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\r\n\r\n".encode()


def _error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}


def _error(status: int, message: str) -> web.Response:
    return web.json_response(_error_body(status, message), status=status)
