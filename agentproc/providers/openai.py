"""The `openai` provider: the Chat Completions API, so any OpenAI-compatible server works
(OpenAI, vLLM, Ollama, llama.cpp, OpenRouter, ...).

Model resource knobs (`Model.spec`):

- `endpoint`: base URL such as `http://127.0.0.1:8080/v1`; default `$OPENAI_BASE_URL`, else the
  public OpenAI API.
- `apiKey`: required for the public API; a local server that needs none may omit it.
- `capabilities.streaming: true`: stream the reply (SSE); text reaches `on_text` as it arrives
  and usage is requested with `stream_options.include_usage` (not sent again to a server that
  refused it with a 400).
- `options` (all optional):
  `organization`, `project` - OpenAI account scoping headers;
  `headers` - extra HTTP headers (e.g. OpenRouter's `HTTP-Referer`, `X-Title`);
  retries, timeouts and fallbacks - see `agentproc.providers.resilience`;
  any other key is a request default, spelled like an Agent param (below).

Agent `modelConfig.params` map as `temperature`, `topP`/`top_p` -> `top_p`,
`maxTokens`/`max_tokens` -> `max_tokens` (and a few more in `_PARAM_NAMES`); unknown ones go into
the request body verbatim (e.g. vLLM's `repetition_penalty`). Agent params win over `options`.

One `complete` is one HTTP attempt (the SDK's retries are off); `ResilientProvider` retries.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import openai

from agentproc.messages import Message, ModelError, ModelReply, ModelRequest, ToolCall, Usage
from agentproc.providers._common import (
    ENDPOINT_FIELD,
    ChunkCallback,
    TextCallback,
    close_quietly,
    context_overflow,
    headers_option,
    interrupted,
    is_context_overflow,
    is_transport_error,
    not_found_hint,
    optional_str,
    retry_after_seconds,
    root_cause,
    status_error,
    unreachable,
)
from agentproc.providers.endpoints import PUBLIC_API
from agentproc.providers.resilience import POLICY_OPTIONS, RetryPolicy
from goondan.bundle.model import ModelSpec
from ipc.error_codes import ErrorCode

DEFAULT_ENDPOINT = PUBLIC_API["openai"]
# Local servers (vLLM, Ollama, llama.cpp) ignore the key, but the SDK insists on one.
LOCAL_PLACEHOLDER_KEY = "not-needed"

# Options that configure the client (or the retry wrapper) rather than the request body.
_CLIENT_OPTIONS = frozenset({"organization", "project", "headers"}) | POLICY_OPTIONS

# Agent params the SDK knows as keyword arguments, with the YAML spellings we accept.
_PARAM_NAMES: dict[str, str] = {
    "temperature": "temperature",
    "topP": "top_p",
    "top_p": "top_p",
    "maxTokens": "max_tokens",
    "max_tokens": "max_tokens",
    "maxCompletionTokens": "max_completion_tokens",
    "max_completion_tokens": "max_completion_tokens",
    "frequencyPenalty": "frequency_penalty",
    "frequency_penalty": "frequency_penalty",
    "presencePenalty": "presence_penalty",
    "presence_penalty": "presence_penalty",
    "stop": "stop",
    "seed": "seed",
}


class OpenAIProvider:
    """One `AsyncOpenAI` client per agent process, reused across Turns for connection pooling."""

    def __init__(
        self,
        spec: ModelSpec,
        api_key: str | None,
        policy: RetryPolicy | None = None,
        *,
        endpoint_field: str = ENDPOINT_FIELD,
    ) -> None:
        """`endpoint_field`: where the endpoint was set, for the errors' hints."""
        self._endpoint_field = endpoint_field
        self._model = spec.model
        self._endpoint = spec.endpoint or DEFAULT_ENDPOINT
        self.label = f"model '{self._model}' at {self._endpoint}"
        self.streaming = spec.capabilities.streaming
        options = dict(spec.options)
        policy = policy or RetryPolicy.from_options(options)
        # Request-level options are defaults under the Agent's params (see `complete`).
        self._default_kwargs, self._default_body = _split_params(
            {k: v for k, v in options.items() if k not in _CLIENT_OPTIONS}
        )
        # An explicit key always: the SDK would otherwise read OPENAI_API_KEY behind the
        # bundle's back, and the bundle is supposed to say where every secret comes from.
        self._client = openai.AsyncOpenAI(
            api_key=_resolve_key(api_key, spec.endpoint),
            base_url=self._endpoint,
            organization=optional_str(options, "organization"),
            project=optional_str(options, "project"),
            timeout=policy.sdk_timeout,
            max_retries=0,  # ResilientProvider retries, the same way for every provider
            default_headers=headers_option(options),
        )
        # Some OpenAI-compatible servers refuse `stream_options` (a 400 naming it); after the
        # first such answer this provider streams without usage figures rather than not at all.
        self._stream_options = True

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextCallback | None = None,
        on_chunk: ChunkCallback | None = None,
    ) -> ModelReply:
        # Merged before the call, not left to the SDK: it would let extra_body override a
        # same-named keyword, and a Model default must never beat the Agent's own params.
        param_kwargs, param_body = _split_params(request.params)
        kwargs = {**self._default_kwargs, **param_kwargs}
        body = {**self._default_body, **param_body}
        if request.tools:
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
        if self.streaming:
            kwargs["stream"] = True
            if self._stream_options:
                kwargs["stream_options"] = {"include_usage": True}
        messages = cast(Any, [_wire_message(m) for m in request.messages])
        try:
            response = await self._client.chat.completions.create(
                model=self._model, messages=messages, extra_body=body or None, **kwargs
            )
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise self._unreachable(exc) from exc
        except openai.APIStatusError as exc:
            if "stream_options" in kwargs and _refuses_stream_options(exc):
                self._stream_options = False  # and the call again, this time without it
                return await self.complete(request, on_text=on_text, on_chunk=on_chunk)
            raise self._status_error(exc) from exc
        except openai.OpenAIError as exc:
            raise ModelError(f"{self._where()} failed: {exc}") from exc
        if self.streaming:
            return await self._read_stream(response, on_text, on_chunk)
        return self._reply(response)

    async def aclose(self) -> None:
        await self._client.close()

    def _reply(self, completion: Any) -> ModelReply:
        choices = getattr(completion, "choices", None)
        if not choices:
            # e.g. a web UI or another API answering 200 at the configured endpoint.
            seen = f": {completion[:200]!r}" if isinstance(completion, str) else ""
            raise ModelError(
                f"{self._where()} did not return a chat completion{seen}; is Model.spec.endpoint "
                "an OpenAI-compatible API (usually ending in /v1)?"
            )
        choice = choices[0]
        message = choice.message
        return ModelReply(
            text=message.content,
            tool_calls=tuple(_tool_call(call) for call in message.tool_calls or ()),
            usage=_usage(getattr(completion, "usage", None)),
            finish_reason=choice.finish_reason,
        )

    async def _read_stream(
        self, stream: Any, on_text: TextCallback | None, on_chunk: ChunkCallback | None
    ) -> ModelReply:
        text: list[str] = []
        calls: dict[int, _PartialCall] = {}
        finish_reason: str | None = None
        usage: Any = None
        chunks = 0
        try:
            async for chunk in stream:
                chunks += 1
                if on_chunk is not None:
                    on_chunk()
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
                choices = getattr(chunk, "choices", None)
                if not choices:
                    continue  # the include_usage chunk has no choices
                choice = choices[0]
                delta = getattr(choice, "delta", None)
                if delta is not None:
                    content = getattr(delta, "content", None)
                    if content:
                        text.append(content)
                        if on_text is not None:
                            on_text(content)
                    for position, call_delta in enumerate(getattr(delta, "tool_calls", None) or ()):
                        index = getattr(call_delta, "index", None)
                        key = index if isinstance(index, int) else len(calls) + position
                        calls.setdefault(key, _PartialCall()).add(call_delta)
                if choice.finish_reason:
                    finish_reason = choice.finish_reason
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except openai.APIError as exc:  # an error event inside the stream, or a broken connection
            raise self._stream_error(exc, chunks) from exc
        except Exception as exc:
            if not is_transport_error(exc):
                raise
            raise self._interrupted(root_cause(exc), chunks) from exc
        finally:
            await close_quietly(stream)
        if chunks == 0:
            # e.g. a web UI answering 200 at the configured endpoint: no SSE events at all.
            raise ModelError(
                f"{self._where()} did not stream a chat completion; is Model.spec.endpoint an "
                "OpenAI-compatible API (usually ending in /v1)?"
            )
        if finish_reason is None:
            raise self._interrupted("the stream ended without a finish_reason", chunks)
        return ModelReply(
            text="".join(text) if text else None,
            tool_calls=tuple(calls[key].tool_call() for key in sorted(calls)),
            usage=_usage(usage),
            finish_reason=finish_reason,
        )

    def _where(self) -> str:
        return self.label

    def _unreachable(self, exc: openai.APIConnectionError) -> ModelError:
        return unreachable(
            self._where(),
            exc,
            timed_out=isinstance(exc, openai.APITimeoutError),
            endpoint_field=self._endpoint_field,
        )

    def _interrupted(self, reason: str, count: int) -> ModelError:
        return interrupted(self._where(), reason, count, "chunks")

    def _stream_error(self, exc: openai.APIError, chunks: int) -> ModelError:
        if isinstance(exc, openai.APIConnectionError):
            return self._interrupted(root_cause(exc), chunks)
        # An error object sent inside the stream (OpenRouter, vLLM do this); it may carry an
        # HTTP-like code. Anything but a client error is worth another try.
        code = exc.body.get("code") if isinstance(exc.body, dict) else None
        status = (
            int(code) if isinstance(code, int) or (isinstance(code, str) and code.isdigit()) else 0
        )
        detail = exc.message or "an error event in the stream"
        if status == 429:
            return ModelError(
                f"{self._where()} is rate limiting ({detail})",
                code=ErrorCode.E_MODEL_RATE_LIMITED,
                retryable=True,
            )
        if is_context_overflow(status, code, exc.body, detail):
            return context_overflow(self._where(), detail)
        if 400 <= status < 500 and status != 408:
            return ModelError(
                f"{self._where()} rejected the request mid-stream ({detail})",
                code=ErrorCode.E_MODEL_BAD_REQUEST,
            )
        return ModelError(
            f"{self._where()} failed mid-stream after {chunks} chunks ({detail})",
            code=ErrorCode.E_MODEL_UNAVAILABLE,
            retryable=True,
        )

    def _status_error(self, exc: openai.APIStatusError) -> ModelError:
        status = exc.status_code
        detail = f"HTTP {status}: {_server_message(exc)}"
        retry_after = retry_after_seconds(exc.response.headers)
        return status_error(
            self._where(),
            status,
            detail,
            retry_after,
            overflow=is_context_overflow(status, exc.body, detail),
            hints={
                404: not_found_hint(self._endpoint_field)
                + " (OpenAI-compatible servers usually serve under /v1)"
            },
        )


@dataclass
class _PartialCall:
    """One tool call assembled from stream deltas (id and name once, arguments in pieces)."""

    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def add(self, delta: Any) -> None:
        if getattr(delta, "id", None):
            self.id = delta.id
        function = getattr(delta, "function", None)
        if function is None:
            return
        name = getattr(function, "name", None)
        if name and not self.name:
            # Some servers repeat the name in every delta; it is never split.
            self.name = name
        piece = getattr(function, "arguments", None)
        if piece:
            self.arguments.append(piece)

    def tool_call(self) -> ToolCall:
        return ToolCall(
            id=self.id or f"call_{uuid.uuid4().hex[:24]}",
            name=self.name,
            arguments="".join(self.arguments),
        )


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=(getattr(usage, "prompt_tokens", None) or 0),
        output_tokens=(getattr(usage, "completion_tokens", None) or 0),
    )


def _resolve_key(api_key: str | None, endpoint: str | None) -> str:
    if api_key:
        return api_key
    if endpoint is not None:
        return LOCAL_PLACEHOLDER_KEY
    raise ModelError(
        f"the openai provider needs an API key for {DEFAULT_ENDPOINT}: set Model.spec.apiKey "
        "(e.g. valueFrom.env: OPENAI_API_KEY), or set Model.spec.endpoint to a local "
        "OpenAI-compatible server",
        code=ErrorCode.E_MODEL_AUTH,
    )


def _split_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Agent params -> (SDK keyword arguments, extra request body fields)."""
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in params.items():
        if key in _PARAM_NAMES:
            kwargs[_PARAM_NAMES[key]] = value
        else:
            extra[key] = value
    return kwargs, extra


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        if message.tool_call_id is None:
            raise ModelError(
                f"tool message {message.id} has no tool_call_id", code=ErrorCode.E_MODEL_BAD_REQUEST
            )
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": message.content or "",
        }
    if message.role == "assistant" and message.tool_calls:
        # content may be null when the assistant only called tools.
        return {
            "role": "assistant",
            "content": message.content,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    # Several compatible servers reject a null content outside the tool-call case.
    return {"role": message.role, "content": message.content or ""}


def _tool_call(call: Any) -> ToolCall:
    function = getattr(call, "function", None)
    if function is None:
        # A `custom` (free-form) tool call; we only declare function tools, so a server that
        # sends one is misbehaving, and the loop should hear about it rather than lose it.
        raise ModelError(f"model returned an unsupported tool call type {call.type!r}")
    return ToolCall(
        # Some llama.cpp builds omit the id; the loop needs one to pair the result with, unique
        # across the whole conversation, which may span restarts.
        id=getattr(call, "id", None) or f"call_{uuid.uuid4().hex[:24]}",
        name=function.name,
        # Kept as the model wrote it: the loop reports malformed JSON back to the model.
        arguments=function.arguments if function.arguments is not None else "",
    )


def _refuses_stream_options(exc: openai.APIStatusError) -> bool:
    return exc.status_code in (400, 422) and "stream_options" in _server_message(exc)


def _server_message(exc: openai.APIStatusError) -> str:
    # The SDK has already unwrapped {"error": {...}}; servers differ in what is inside.
    body = exc.body
    if isinstance(body, dict):
        for key in ("message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return value
    if isinstance(body, str) and body:
        return body[:500]
    return exc.message
