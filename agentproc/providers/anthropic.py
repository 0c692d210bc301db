"""The `anthropic` provider: the Messages API through the official `anthropic` SDK.

Model resource knobs (`Model.spec`):

- `apiKey`: required for the public API (e.g. `valueFrom.env: ANTHROPIC_API_KEY`); a proxy or a
  local server at `endpoint` that needs none may omit it.
- `endpoint`: base URL, default `$ANTHROPIC_BASE_URL`, else `https://api.anthropic.com` (a
  trailing `/v1` is accepted and dropped: the SDK adds `/v1/messages` itself).
- `capabilities.streaming: true`: stream the reply (SSE events); text reaches `on_text` as it
  arrives.
- `options` (all optional): `promptCaching` (true) - `cache_control` breakpoints on the system
  prompt, the tools and the stable history (`mark_cache_breakpoints`); `headers` - extra HTTP
  headers (e.g. `anthropic-beta`); retries,
  timeouts and fallbacks - see `agentproc.providers.resilience`; any other key is a request
  default, spelled like an Agent param (below).

Agent `modelConfig.params`: `maxTokens`/`max_tokens` -> `max_tokens` (the API requires it; default
4096), `temperature`, `topP` -> `top_p`, `topK` -> `top_k`, `stop`/`stopSequences` ->
`stop_sequences`, `toolChoice` -> `tool_choice`, `thinking`, `metadata`, `serviceTier`; the
OpenAI-only sampling knobs (`frequencyPenalty`, `presencePenalty`, `seed`) are dropped, so one
Agent can run on either provider (or fall back from one to the other); other keys go into the
request body verbatim.

The neutral conversation is translated here: system messages go to `system`; an assistant's tool
calls become `tool_use` blocks (ids kept; characters the API refuses become `_`, the same way in
the matching `tool_result`); tool results become a user message of `tool_result` blocks, with
consecutive results (and any user text right after them) merged into one user message.
Stop reasons are reported in the OpenAI vocabulary the loop already knows: `end_turn` /
`stop_sequence` -> `stop`, `tool_use` -> `tool_calls`, `max_tokens` -> `length`, `refusal` ->
`content_filter`.

One `complete` is one HTTP attempt (the SDK's retries are off); `ResilientProvider` retries.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import anthropic

from agentproc.messages import Message, ModelError, ModelReply, ModelRequest, ToolCall, Usage
from agentproc.providers._common import (
    ENDPOINT_FIELD,
    ChunkCallback,
    TextCallback,
    close_quietly,
    headers_option,
    interrupted,
    is_context_overflow,
    is_transport_error,
    retry_after_seconds,
    root_cause,
    status_error,
    unreachable,
)
from agentproc.providers.endpoints import PUBLIC_API
from agentproc.providers.resilience import POLICY_OPTIONS, RetryPolicy
from goondan.bundle.model import ModelSpec
from ipc.error_codes import ErrorCode

DEFAULT_ENDPOINT = PUBLIC_API["anthropic"]
DEFAULT_MAX_TOKENS = 4096
API_KEY_ENV = "ANTHROPIC_API_KEY"
LOCAL_PLACEHOLDER_KEY = "not-needed"

_CLIENT_OPTIONS = frozenset({"headers", "promptCaching"}) | POLICY_OPTIONS
# Anthropic allows at most this many `cache_control` breakpoints in one request.
_MAX_BREAKPOINTS = 4
_EPHEMERAL = {"type": "ephemeral"}
# Where an assistant message keeps its thinking blocks (in `metadata["providerState"]`).
STATE_KEY = "anthropic"

_PARAM_NAMES: dict[str, str] = {
    "maxTokens": "max_tokens",
    "max_tokens": "max_tokens",
    "maxCompletionTokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "temperature": "temperature",
    "topP": "top_p",
    "top_p": "top_p",
    "topK": "top_k",
    "top_k": "top_k",
    "stop": "stop_sequences",
    "stopSequences": "stop_sequences",
    "stop_sequences": "stop_sequences",
    "toolChoice": "tool_choice",
    "tool_choice": "tool_choice",
    "thinking": "thinking",
    "metadata": "metadata",
    "serviceTier": "service_tier",
    "service_tier": "service_tier",
}
# Chat Completions knobs the Messages API rejects; dropped rather than failing the call.
_OPENAI_ONLY = frozenset(
    {"frequencyPenalty", "frequency_penalty", "presencePenalty", "presence_penalty", "seed"}
)

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

# An error event inside a 200 stream carries only the error type; this is its HTTP status.
_ERROR_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

_TOOL_ID_REFUSED = re.compile(r"[^a-zA-Z0-9_-]")


class AnthropicProvider:
    """One `AsyncAnthropic` client per agent process, reused across Turns."""

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
        endpoint = (spec.endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self._endpoint = endpoint.removesuffix("/v1")
        self.label = f"model '{self._model}' at {self._endpoint}"
        self.streaming = spec.capabilities.streaming
        options = dict(spec.options)
        policy = policy or RetryPolicy.from_options(options)
        self._default_params = _params(
            {k: v for k, v in options.items() if k not in _CLIENT_OPTIONS}
        )
        caching = options.get("promptCaching", True)
        if not isinstance(caching, bool):
            raise ModelError(
                f"Model.spec.options.promptCaching must be true or false, got {caching!r}",
                code=ErrorCode.E_MODEL_CONFIG,
            )
        self._caching = caching
        # An explicit key and base URL always: the SDK would otherwise read ANTHROPIC_API_KEY
        # behind the bundle's back (`providers.endpoints` honours ANTHROPIC_BASE_URL openly).
        self._client = anthropic.AsyncAnthropic(
            api_key=_resolve_key(api_key, spec.endpoint),
            base_url=self._endpoint,
            timeout=policy.sdk_timeout,
            max_retries=0,  # ResilientProvider retries, the same way for every provider
            default_headers=headers_option(options),
        )

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextCallback | None = None,
        on_chunk: ChunkCallback | None = None,
    ) -> ModelReply:
        # Every param travels in the body (renamed): SDK releases differ in which of them they
        # accept as keywords (newer ones dropped temperature/top_p/top_k), the API does not.
        body = {**self._default_params, **_params(request.params)}
        kwargs: dict[str, Any] = {"max_tokens": body.pop("max_tokens", DEFAULT_MAX_TOKENS)}
        system, messages = wire_messages(request.messages)
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        if self._caching:
            blocks = mark_cache_breakpoints(system, tools, messages)
            if blocks:
                kwargs["system"] = blocks
        elif system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = tools
        try:
            response = await self._client.messages.create(
                model=self._model,
                messages=cast(Any, messages),
                stream=self.streaming,
                extra_body=body or None,
                **kwargs,
            )
        except anthropic.APIConnectionError as exc:  # includes APITimeoutError
            raise self._unreachable(exc) from exc
        except anthropic.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except anthropic.AnthropicError as exc:
            raise ModelError(f"{self.label} failed: {exc}") from exc
        if self.streaming:
            return await self._read_stream(response, on_text, on_chunk)
        return self._reply(response)

    async def aclose(self) -> None:
        await self._client.close()

    def _reply(self, message: Any) -> ModelReply:
        content = getattr(message, "content", None)
        if not isinstance(content, list):
            seen = f": {message[:200]!r}" if isinstance(message, str) else ""
            raise ModelError(
                f"{self.label} did not return a message{seen}; is Model.spec.endpoint the "
                "Anthropic API (or a compatible one)?"
            )
        text: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[dict[str, Any]] = []
        for block in content:
            kind = getattr(block, "type", None)
            if kind == "thinking":
                thinking.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
                )
            elif kind == "redacted_thinking":
                thinking.append({"type": "redacted_thinking", "data": block.data})
            elif kind == "text":
                text.append(block.text)
            elif kind == "tool_use":
                calls.append(
                    ToolCall(
                        id=block.id or _new_id(),
                        name=block.name,
                        arguments=json.dumps(block.input, ensure_ascii=False),
                    )
                )
            # server tool blocks are not part of the neutral model
        return ModelReply(
            text="".join(text) if text else None,
            tool_calls=tuple(calls),
            usage=_usage(getattr(message, "usage", None)),
            finish_reason=_stop_reason(getattr(message, "stop_reason", None)),
            provider_state=_thinking_state(thinking, calls),
        )

    async def _read_stream(
        self, stream: Any, on_text: TextCallback | None, on_chunk: ChunkCallback | None
    ) -> ModelReply:
        state = _StreamState()
        events = 0
        try:
            async for event in stream:
                events += 1
                if on_chunk is not None:
                    on_chunk()
                state.apply(event, on_text)
        except anthropic.APIStatusError as exc:  # an `error` event in the stream
            raise self._status_error(exc, events=events) from exc
        except anthropic.APIConnectionError as exc:
            raise self._interrupted(root_cause(exc), events) from exc
        except Exception as exc:
            if not is_transport_error(exc):
                raise
            raise self._interrupted(root_cause(exc), events) from exc
        finally:
            await close_quietly(stream)
        if events == 0:
            raise ModelError(
                f"{self.label} did not stream a message; is Model.spec.endpoint the Anthropic "
                "API (or a compatible one)?"
            )
        if not state.stopped:
            raise self._interrupted("the stream ended before message_stop", events)
        return state.reply()

    def _unreachable(self, exc: anthropic.APIConnectionError) -> ModelError:
        return unreachable(
            self.label,
            exc,
            timed_out=isinstance(exc, anthropic.APITimeoutError),
            endpoint_field=self._endpoint_field,
        )

    def _interrupted(self, reason: str, count: int) -> ModelError:
        return interrupted(self.label, reason, count, "events")

    def _status_error(self, exc: anthropic.APIStatusError, events: int | None = None) -> ModelError:
        error_type, server_message = _error_of(exc.body)
        status = exc.status_code
        if status < 400:  # an error event inside a 200 stream
            status = _ERROR_TYPE_STATUS.get(error_type or "", 500)
        shown = server_message or (str(exc.body)[:500] if exc.body else exc.message)
        detail = f"HTTP {status}" + (f" {error_type}" if error_type else "") + f": {shown}"
        if events is not None:
            detail += f", after {events} stream events"
        retry_after = retry_after_seconds(exc.response.headers)
        return status_error(
            self.label,
            status,
            detail,
            retry_after,
            overflow=is_context_overflow(status, error_type, shown),
            key_hint=f" (e.g. valueFrom.env: {API_KEY_ENV})",
            endpoint_field=self._endpoint_field,
            hints={402: "; check the account's billing and credit balance"},
        )


@dataclass
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    start_input: Any = None
    signature: str = ""
    data: str = ""


class _StreamState:
    """Assembles the Messages API event stream into one reply."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.usage: Any = None  # message_start's, updated by message_delta
        self.output_tokens = 0
        self.stop_reason: str | None = None
        self.stopped = False

    def apply(self, event: Any, on_text: TextCallback | None) -> None:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            self.usage = getattr(event.message, "usage", None)
            self.output_tokens = getattr(self.usage, "output_tokens", None) or 0
        elif kind == "content_block_start":
            block = event.content_block
            self.blocks[event.index] = _Block(
                kind=getattr(block, "type", "") or "",
                id=getattr(block, "id", None) or "",
                name=getattr(block, "name", None) or "",
                parts=[block.text] if getattr(block, "type", None) == "text" and block.text else [],
                start_input=getattr(block, "input", None),
                signature=getattr(block, "signature", None) or "",
                data=getattr(block, "data", None) or "",
            )
        elif kind == "content_block_delta":
            target = self.blocks.get(event.index)
            delta = event.delta
            delta_kind = getattr(delta, "type", None)
            if target is None:
                return
            if delta_kind == "text_delta" and target.kind == "text":
                target.parts.append(delta.text)
                if on_text is not None and delta.text:
                    on_text(delta.text)
            elif delta_kind == "input_json_delta" and target.kind == "tool_use":
                target.parts.append(delta.partial_json)
            elif delta_kind == "thinking_delta" and target.kind == "thinking":
                target.parts.append(delta.thinking)
            elif delta_kind == "signature_delta" and target.kind == "thinking":
                target.signature = delta.signature
        elif kind == "message_delta":
            reason = getattr(event.delta, "stop_reason", None)
            if reason:
                self.stop_reason = reason
            usage = getattr(event, "usage", None)
            output_tokens = getattr(usage, "output_tokens", None)
            if output_tokens is not None:
                self.output_tokens = output_tokens
            if getattr(usage, "input_tokens", None) is not None:
                self.usage = usage
        elif kind == "message_stop":
            self.stopped = True

    def reply(self) -> ModelReply:
        text: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.kind == "thinking":
                thinking.append(
                    {
                        "type": "thinking",
                        "thinking": "".join(block.parts),
                        "signature": block.signature,
                    }
                )
            elif block.kind == "redacted_thinking":
                thinking.append({"type": "redacted_thinking", "data": block.data})
            elif block.kind == "text":
                text.extend(block.parts)
            elif block.kind == "tool_use":
                arguments = "".join(block.parts)
                if not arguments:
                    # No deltas: the arguments are whatever the start event carried ({}).
                    arguments = json.dumps(block.start_input or {}, ensure_ascii=False)
                calls.append(
                    ToolCall(id=block.id or _new_id(), name=block.name, arguments=arguments)
                )
        return ModelReply(
            text="".join(text) if text else None,
            tool_calls=tuple(calls),
            usage=_usage(self.usage, self.output_tokens),
            finish_reason=_stop_reason(self.stop_reason),
            provider_state=_thinking_state(thinking, calls),
        )


def wire_messages(messages: list[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """The neutral conversation -> (`system`, Messages API `messages`)."""
    system: list[str] = []
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.content and message.content.strip():
                system.append(message.content)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue  # the API refuses empty content; an empty message says nothing anyway
        if wire and wire[-1]["role"] == role:
            merged = wire[-1]["content"] + blocks
            if role == "user":
                # tool_result blocks must lead their user message.
                merged.sort(key=lambda block: block["type"] != "tool_result")
            wire[-1]["content"] = merged
        else:
            wire.append({"role": role, "content": blocks})
    return ("\n\n".join(system) or None), wire


def _blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.role == "tool":
        if message.tool_call_id is None:
            raise ModelError(
                f"tool message {message.id} has no tool_call_id", code=ErrorCode.E_MODEL_BAD_REQUEST
            )
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": wire_tool_id(message.tool_call_id),
        }
        if message.content:
            result["content"] = message.content
        media = message.metadata.get("media")
        if media:  # a tool's images (MCP image content) go with the text that describes them
            result["content"] = [
                {"type": "text", "text": message.content or ""},
                *(
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": m["mimeType"],
                            "data": m["data"],
                        },
                    }
                    for m in media
                ),
            ]
        if _is_error_result(message.content):
            result["is_error"] = True
        return [result]
    if message.role == "assistant" and message.tool_calls:
        # Thinking blocks, signatures and all, go back first, as the API requires when
        # thinking is on and the model is in the middle of a tool loop.
        state = message.metadata.get("providerState", {}).get(STATE_KEY, {})
        thinking = state.get("thinking") if isinstance(state, dict) else None
        if isinstance(thinking, list):
            blocks.extend(dict(block) for block in thinking if isinstance(block, dict))
    if message.content and message.content.strip():
        blocks.append({"type": "text", "text": message.content})
    if message.role == "assistant":
        for call in message.tool_calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": wire_tool_id(call.id),
                    "name": call.name,
                    "input": _tool_input(call.arguments),
                }
            )
    return blocks


def wire_tool_id(call_id: str) -> str:
    """A tool-call id as the Messages API accepts it (`^[a-zA-Z0-9_-]+$`): ids from this API
    or OpenAI pass unchanged; others (another model before a fallback) get `_` for the rest."""
    return _TOOL_ID_REFUSED.sub("_", call_id) or "toolu_empty"


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        # A malformed call the loop already answered with an error result; the API needs an
        # object here, and the result explains what was wrong.
        return {}
    return value if isinstance(value, dict) else {}


def _is_error_result(content: str | None) -> bool:
    """The loop writes tool results as JSON `{"status": "ok" | "error", ...}`."""
    if not content or not content.lstrip().startswith("{"):
        return False
    try:
        data = json.loads(content)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("status") == "error"


def _params(params: dict[str, Any]) -> dict[str, Any]:
    """Agent params (or Model option defaults) -> Messages API request fields."""
    fields: dict[str, Any] = {}
    for key, value in params.items():
        if key in _OPENAI_ONLY:
            continue
        name = _PARAM_NAMES.get(key, key)
        fields[name] = [value] if name == "stop_sequences" and isinstance(value, str) else value
    return fields


def _resolve_key(api_key: str | None, endpoint: str | None) -> str:
    if api_key:
        return api_key
    if endpoint is not None:
        return LOCAL_PLACEHOLDER_KEY
    raise ModelError(
        f"the anthropic provider needs an API key for {DEFAULT_ENDPOINT}: set Model.spec.apiKey "
        f"(e.g. valueFrom.env: {API_KEY_ENV}) and export {API_KEY_ENV}",
        code=ErrorCode.E_MODEL_AUTH,
    )


def mark_cache_breakpoints(
    system: str | None, tools: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """Put `cache_control` on what stays the same from one request to the next: the system
    prompt, the tools, and the conversation up to the last message (where the next request's
    prefix ends) and up to the one before it (this request's stable history, which the previous
    request cached). Returns the system prompt as blocks (`cache_control` needs them)."""
    marks = 0
    blocks = None
    if system:
        blocks = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
        marks += 1
    if tools:
        tools[-1]["cache_control"] = _EPHEMERAL
        marks += 1
    for message in reversed(messages[-2:]):
        if marks >= _MAX_BREAKPOINTS:
            break
        cacheable = [b for b in message["content"] if b.get("type") not in _THINKING_TYPES]
        if cacheable:
            cacheable[-1]["cache_control"] = _EPHEMERAL
            marks += 1
    return blocks


_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def _thinking_state(thinking: list[dict[str, Any]], calls: list[ToolCall]) -> dict[str, Any]:
    # Only a tool-calling reply's thinking must go back (the loop continues from it).
    return {STATE_KEY: {"thinking": thinking}} if thinking and calls else {}


def _usage(usage: Any, output_tokens: int | None = None) -> Usage:
    # input_tokens excludes the prompt-cache reads and writes; all of it was sent.
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    created = getattr(usage, "cache_creation_input_tokens", None) or 0
    return Usage(
        input_tokens=(getattr(usage, "input_tokens", None) or 0) + read + created,
        output_tokens=(
            output_tokens
            if output_tokens is not None
            else getattr(usage, "output_tokens", None) or 0
        ),
        cache_read_tokens=read,
        cache_creation_tokens=created,
    )


def _stop_reason(reason: str | None) -> str | None:
    return None if reason is None else _STOP_REASONS.get(reason, reason)


def _error_of(body: object) -> tuple[str | None, str | None]:
    """`{"type": "error", "error": {"type", "message"}}` -> (type, message)."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            kind, message = error.get("type"), error.get("message")
            return (
                kind if isinstance(kind, str) else None,
                message if isinstance(message, str) else None,
            )
    if isinstance(body, str) and body:
        return None, body[:500]
    return None, None


def _new_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"
