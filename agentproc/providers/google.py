"""The `google` provider: the Gemini API (Google AI Studio keys) through the official `google-genai`
SDK.

Model resource knobs (`Model.spec`):

- `apiKey`: required for the public API (e.g. `valueFrom.env: GEMINI_API_KEY`); a proxy or a
  local server at `endpoint` that needs none may omit it.
- `endpoint`: base URL, default `$GOOGLE_GEMINI_BASE_URL` (the SDK's own variable), else
  `https://generativelanguage.googleapis.com`; the SDK adds `/v1beta/models/...` itself.
- `capabilities.streaming: true`: `streamGenerateContent` (SSE); text reaches `on_text` as it
  arrives.
- `options` (all optional): `headers` - extra HTTP headers; retries, timeouts and fallbacks - see
  `agentproc.providers.resilience`; any other key is a request default, spelled like an Agent
  param (below).

Agent `modelConfig.params`: `temperature`, `topP`, `topK`, `maxTokens` -> `max_output_tokens`,
`stop`/`stopSequences`, `seed`, `presencePenalty`, `frequencyPenalty`, `thinkingConfig` (e.g.
`{thinkingBudget: 0}`), `responseMimeType`; the keys only another provider knows (`thinking`,
`metadata`, `serviceTier`, `toolChoice`) are dropped so one Agent can fall back across providers;
others go to `GenerateContentConfig` as they are (snake_case or camelCase).

The neutral conversation is translated here: system messages go to `system_instruction`; an
assistant's tool calls become `functionCall` parts of a `model` turn (with the thought signatures
Gemini returned, kept in the message's metadata, as Gemini 3 requires); tool results become
`functionResponse` parts of one `user` turn (the response is the result's JSON object).
Finish reasons in the loop's vocabulary: `STOP` -> `stop` (`tool_calls` when the reply calls
tools), `MAX_TOKENS` -> `length`, the safety ones -> `content_filter`,
`MALFORMED_FUNCTION_CALL` -> `tool_calls` (with no calls: the loop asks the model again).

One `complete` is one HTTP attempt (the SDK's retries are off); `ResilientProvider` retries.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

import httpx
from google import genai
from google.genai import errors, types

from agentproc.messages import Message, ModelError, ModelReply, ModelRequest, ToolCall, Usage
from agentproc.providers._common import (
    ENDPOINT_FIELD,
    ChunkCallback,
    TextCallback,
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

DEFAULT_ENDPOINT = PUBLIC_API["google"]
API_KEY_ENV = "GEMINI_API_KEY"
LOCAL_PLACEHOLDER_KEY = "not-needed"
# Where an assistant message keeps what only this provider reads back (thought signatures).
STATE_KEY = "google"

_CLIENT_OPTIONS = frozenset({"headers"}) | POLICY_OPTIONS

_PARAM_NAMES: dict[str, str] = {
    "temperature": "temperature",
    "topP": "top_p",
    "top_p": "top_p",
    "topK": "top_k",
    "top_k": "top_k",
    "maxTokens": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "maxCompletionTokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "maxOutputTokens": "max_output_tokens",
    "stop": "stop_sequences",
    "stopSequences": "stop_sequences",
    "stop_sequences": "stop_sequences",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "presence_penalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
    "frequency_penalty": "frequency_penalty",
    "thinkingConfig": "thinking_config",
    "responseMimeType": "response_mime_type",
}
# Other providers' knobs; dropped so an Agent written for them runs here too.
_FOREIGN = frozenset(
    {"thinking", "metadata", "serviceTier", "service_tier", "toolChoice", "tool_choice"}
)

_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "MALFORMED_FUNCTION_CALL": "tool_calls",
    "UNEXPECTED_TOOL_CALL": "tool_calls",
}

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class GoogleProvider:
    """One `genai.Client` per agent process, reused across Turns."""

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
        self._model = spec.model.removeprefix("models/")
        self._endpoint = (spec.endpoint or DEFAULT_ENDPOINT).rstrip("/").removesuffix("/v1beta")
        self.label = f"model '{self._model}' at {self._endpoint}"
        self.streaming = spec.capabilities.streaming
        options = dict(spec.options)
        policy = policy or RetryPolicy.from_options(options)
        self._default_config = _config_fields(
            {k: v for k, v in options.items() if k not in _CLIENT_OPTIONS}
        )
        # An explicit key, base URL and backend always: the SDK would otherwise read
        # GEMINI_API_KEY / GOOGLE_GENAI_USE_VERTEXAI behind the bundle's back.
        self._client = genai.Client(
            vertexai=False,
            api_key=_resolve_key(api_key, spec.endpoint),
            http_options=types.HttpOptions(
                base_url=self._endpoint,
                # Pinned: SDK releases differ in their default, and function calling with JSON
                # schemas and thought signatures is a v1beta feature.
                api_version="v1beta",
                headers=headers_option(options),
                timeout=int(policy.sdk_timeout * 1000),
                # ResilientProvider retries, the same way for every provider.
                retry_options=types.HttpRetryOptions(attempts=1),
                # httpx, as under the other SDKs: with a transport of its own the SDK does not
                # switch to aiohttp (which it would, aiohttp being installed here).
                async_client_args={"transport": httpx.AsyncHTTPTransport()},
            ),
        ).aio

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextCallback | None = None,
        on_chunk: ChunkCallback | None = None,
    ) -> ModelReply:
        fields = {**self._default_config, **_config_fields(request.params)}
        system, wire = wire_contents(request.messages)
        # Plain dicts, which the SDK accepts; its type for them is a union that names PIL's
        # Image, and with pillow installed (the `bench` extra) mypy then rejects a dict list.
        contents: Any = wire
        if system:
            fields["system_instruction"] = system
        if request.tools:
            fields["tools"] = [
                {
                    "function_declarations": [
                        {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters_json_schema": tool.parameters,
                        }
                        for tool in request.tools
                    ]
                }
            ]
            # The loop runs the tools; the SDK must never call anything itself.
            fields["automatic_function_calling"] = {"disable": True}
        try:
            config = types.GenerateContentConfig(**fields)
        except ValueError as exc:  # pydantic: an unknown or mistyped param
            raise ModelError(
                f"{self.label}: a model param is not a Gemini GenerateContentConfig field: {exc}",
                code=ErrorCode.E_MODEL_CONFIG,
            ) from None
        try:
            if self.streaming:
                stream = await self._client.models.generate_content_stream(
                    model=self._model, contents=contents, config=config
                )
            else:
                response = await self._client.models.generate_content(
                    model=self._model, contents=contents, config=config
                )
        except errors.APIError as exc:
            raise self._status_error(exc) from exc
        except Exception as exc:
            if not is_transport_error(exc):
                raise
            raise self._unreachable(exc) from exc
        if self.streaming:
            return await self._read_stream(stream, on_text, on_chunk)
        return self._reply([response])

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _read_stream(
        self, stream: Any, on_text: TextCallback | None, on_chunk: ChunkCallback | None
    ) -> ModelReply:
        chunks: list[Any] = []
        try:
            async for chunk in stream:
                chunks.append(chunk)
                if on_chunk is not None:
                    on_chunk()
                if on_text is not None:
                    for part in _parts(chunk):
                        if part.text and not part.thought:
                            on_text(part.text)
        except errors.APIError as exc:  # an error object inside the stream
            raise self._status_error(exc, events=len(chunks)) from exc
        except Exception as exc:
            if not is_transport_error(exc):
                raise
            raise self._interrupted(root_cause(exc), len(chunks)) from exc
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # noqa: BLE001 - best effort on an already failed stream
                    pass
        if not chunks:
            raise ModelError(
                f"{self.label} did not stream a response; is Model.spec.endpoint the Gemini API "
                "(or a compatible one)?"
            )
        if _finish_reason(chunks[-1]) is None:
            raise self._interrupted("the stream ended without a finishReason", len(chunks))
        return self._reply(chunks)

    def _reply(self, responses: list[Any]) -> ModelReply:
        text: list[str] = []
        calls: list[ToolCall] = []
        signatures: dict[str, str] = {}
        for response in responses:
            for part in _parts(response):
                if part.text and not part.thought:
                    text.append(part.text)
                call = part.function_call
                if call is not None:
                    call_id = call.id or f"gcall_{uuid.uuid4().hex[:24]}"
                    calls.append(
                        ToolCall(
                            id=call_id,
                            name=call.name or "",
                            arguments=json.dumps(call.args or {}, ensure_ascii=False),
                        )
                    )
                    if part.thought_signature:
                        signatures[call_id] = base64.b64encode(part.thought_signature).decode()
        last = responses[-1]
        if not getattr(last, "candidates", None) and getattr(last, "prompt_feedback", None):
            reason = getattr(last.prompt_feedback, "block_reason", None)
            return ModelReply(
                text=None,
                usage=_usage(getattr(last, "usage_metadata", None)),
                finish_reason="content_filter" if reason else "stop",
            )
        reason = _finish_reason(last)
        finish = _FINISH.get(reason or "", reason.lower() if reason else None)
        if calls and finish == "stop":
            finish = "tool_calls"
        return ModelReply(
            text="".join(text) if text else None,
            tool_calls=tuple(calls),
            usage=_usage(_last_usage(responses)),
            finish_reason=finish,
            provider_state={STATE_KEY: {"signatures": signatures}} if signatures else {},
        )

    def _unreachable(self, exc: BaseException) -> ModelError:
        return unreachable(
            self.label,
            exc,
            timed_out=isinstance(exc, TimeoutError),
            endpoint_field=self._endpoint_field,
        )

    def _interrupted(self, reason: str, count: int) -> ModelError:
        return interrupted(self.label, reason, count, "events")

    def _status_error(self, exc: errors.APIError, events: int | None = None) -> ModelError:
        status = exc.code or 500
        shown = exc.message or (str(exc.details)[:500] if exc.details else str(exc))
        detail = f"HTTP {status}" + (f" {exc.status}" if exc.status else "") + f": {shown}"
        if events:
            detail += f", after {events} stream events"
        headers = getattr(getattr(exc, "response", None), "headers", None)
        retry_after = retry_after_seconds(headers) if headers is not None else None
        return status_error(
            self.label,
            status,
            detail,
            retry_after,
            overflow=is_context_overflow(status, exc.status, shown),
            key_hint=f" (e.g. valueFrom.env: {API_KEY_ENV})",
            endpoint_field=self._endpoint_field,
            # Gemini answers a wrong key with 400 INVALID_ARGUMENT (reason API_KEY_INVALID).
            bad_key=status == 400 and "API key" in shown,
        )


def wire_contents(messages: list[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """The neutral conversation -> (`system_instruction`, `contents`), as SDK dicts."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool-call id -> function name, for the responses
    for message in messages:
        if message.role == "system":
            if message.content and message.content.strip():
                system.append(message.content)
            continue
        parts: list[dict[str, Any]] = []
        if message.role == "tool":
            if message.tool_call_id is None:
                raise ModelError(
                    f"tool message {message.id} has no tool_call_id",
                    code=ErrorCode.E_MODEL_BAD_REQUEST,
                )
            parts.append(
                {
                    "function_response": {
                        "id": message.tool_call_id,
                        "name": names.get(message.tool_call_id, "unknown"),
                        "response": _response_object(message.content),
                    }
                }
            )
            role = "user"
        else:
            role = "model" if message.role == "assistant" else "user"
            if message.content and message.content.strip():
                parts.append({"text": message.content})
            state = message.metadata.get("providerState", {}).get(STATE_KEY, {})
            signatures = state.get("signatures", {}) if isinstance(state, dict) else {}
            for call in message.tool_calls:
                names[call.id] = call.name
                part: dict[str, Any] = {
                    "function_call": {
                        "id": call.id,
                        "name": call.name,
                        "args": _arguments(call.arguments),
                    }
                }
                signature = signatures.get(call.id)
                if isinstance(signature, str):
                    part["thought_signature"] = base64.b64decode(signature)
                parts.append(part)
        if not parts:
            continue  # the API refuses a turn without parts
        if contents and contents[-1]["role"] == role:
            merged = contents[-1]["parts"] + parts
            if role == "user":
                # Function responses lead their turn, right after the calls they answer.
                merged.sort(key=lambda part: "function_response" not in part)
            contents[-1]["parts"] = merged
        else:
            contents.append({"role": role, "parts": parts})
    return ("\n\n".join(system) or None), contents


def _response_object(content: str | None) -> dict[str, Any]:
    """A tool result as the object `functionResponse.response` must be: the loop's JSON result
    as it is, anything else under `output`."""
    if content and content.lstrip().startswith("{"):
        try:
            value = json.loads(content)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    return {"output": content or ""}


def _arguments(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        # A malformed call the loop already answered with an error result.
        return {}
    return value if isinstance(value, dict) else {}


def _config_fields(params: dict[str, Any]) -> dict[str, Any]:
    """Agent params (or Model option defaults) -> `GenerateContentConfig` fields."""
    fields: dict[str, Any] = {}
    for key, value in params.items():
        if key in _FOREIGN:
            continue
        name = _PARAM_NAMES.get(key) or _CAMEL.sub("_", key).lower()
        fields[name] = [value] if name == "stop_sequences" and isinstance(value, str) else value
    return fields


def _parts(response: Any) -> list[Any]:
    candidates = getattr(response, "candidates", None)
    if not candidates:
        return []
    content = getattr(candidates[0], "content", None)
    return list(getattr(content, "parts", None) or ())


def _finish_reason(response: Any) -> str | None:
    candidates = getattr(response, "candidates", None)
    if not candidates:
        # A prompt blocked before any candidate: the response itself is the end.
        return "SAFETY" if getattr(response, "prompt_feedback", None) else None
    reason = getattr(candidates[0], "finish_reason", None)
    if reason is None:
        return None
    return str(getattr(reason, "value", reason))


def _last_usage(responses: list[Any]) -> Any:
    for response in reversed(responses):
        usage = getattr(response, "usage_metadata", None)
        if usage is not None:
            return usage
    return None


def _usage(usage: Any) -> Usage:
    # promptTokenCount includes the cached part; thinking tokens are output the model produced.
    return Usage(
        input_tokens=getattr(usage, "prompt_token_count", None) or 0,
        output_tokens=(getattr(usage, "candidates_token_count", None) or 0)
        + (getattr(usage, "thoughts_token_count", None) or 0),
    )


def _resolve_key(api_key: str | None, endpoint: str | None) -> str:
    if api_key:
        return api_key
    if endpoint is not None:
        return LOCAL_PLACEHOLDER_KEY
    raise ModelError(
        f"the google provider needs an API key for {DEFAULT_ENDPOINT}: set Model.spec.apiKey "
        f"(e.g. valueFrom.env: {API_KEY_ENV}) and export {API_KEY_ENV}",
        code=ErrorCode.E_MODEL_AUTH,
    )
