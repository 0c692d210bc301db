"""The `openai` provider: the Chat Completions API, so any OpenAI-compatible server works
(OpenAI, vLLM, Ollama, llama.cpp, OpenRouter, ...).

Model resource knobs (`Model.spec`):

- `endpoint`: base URL such as `http://127.0.0.1:8080/v1`; default the public OpenAI API.
- `apiKey`: required for the public API; a local server that needs none may omit it.
- `options` (all optional):
  `timeoutSeconds` (default 120) - per HTTP attempt;
  `maxRetries` (default 2) - SDK retries on connection errors, 408/409/429/5xx, with backoff;
  `organization`, `project` - OpenAI account scoping headers;
  `headers` - extra HTTP headers (e.g. OpenRouter's `HTTP-Referer`, `X-Title`);
  any other key is a request default, spelled like an Agent param (below).

Agent `modelConfig.params` map as `temperature`, `topP`/`top_p` -> `top_p`,
`maxTokens`/`max_tokens` -> `max_tokens` (and a few more in `_PARAM_NAMES`); unknown ones go into
the request body verbatim (e.g. vLLM's `repetition_penalty`). Agent params win over `options`.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

import openai

from agentproc.messages import Message, ModelError, ModelReply, ModelRequest, ToolCall, Usage
from goondan.bundle.model import ModelSpec

DEFAULT_ENDPOINT = "https://api.openai.com/v1"
DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_MAX_RETRIES = 2
# Local servers (vLLM, Ollama, llama.cpp) ignore the key, but the SDK insists on one.
LOCAL_PLACEHOLDER_KEY = "not-needed"

# Options that configure the client rather than the request body.
_CLIENT_OPTIONS = frozenset({"timeoutSeconds", "maxRetries", "organization", "project", "headers"})

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

    def __init__(self, spec: ModelSpec, api_key: str | None) -> None:
        self._model = spec.model
        self._endpoint = spec.endpoint or DEFAULT_ENDPOINT
        options = dict(spec.options)
        self._timeout = _positive_number(options, "timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
        max_retries = _non_negative_int(options, "maxRetries", DEFAULT_MAX_RETRIES)
        headers = options.get("headers") or {}
        if not isinstance(headers, dict):
            raise ModelError(
                "Model.spec.options.headers must be a map of header name to value",
                code="E_MODEL_CONFIG",
            )
        # Request-level options are defaults under the Agent's params (see `complete`).
        self._default_kwargs, self._default_body = _split_params(
            {k: v for k, v in options.items() if k not in _CLIENT_OPTIONS}
        )
        # An explicit key always: the SDK would otherwise read OPENAI_API_KEY behind the
        # bundle's back, and the bundle is supposed to say where every secret comes from.
        self._client = openai.AsyncOpenAI(
            api_key=_resolve_key(api_key, spec.endpoint),
            base_url=self._endpoint,
            organization=_optional_str(options, "organization"),
            project=_optional_str(options, "project"),
            timeout=self._timeout,
            max_retries=max_retries,
            default_headers={str(k): str(v) for k, v in headers.items()},
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
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
        try:
            completion = await self._client.chat.completions.create(
                model=self._model,
                messages=cast(Any, [_wire_message(m) for m in request.messages]),
                extra_body=body or None,
                **kwargs,
            )
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise self._unreachable(exc) from exc
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except openai.OpenAIError as exc:
            raise ModelError(f"{self._where()} failed: {exc}") from exc
        return self._reply(completion)

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
        usage = getattr(completion, "usage", None)
        return ModelReply(
            text=message.content,
            tool_calls=tuple(_tool_call(call) for call in message.tool_calls or ()),
            usage=Usage(
                input_tokens=(getattr(usage, "prompt_tokens", None) or 0),
                output_tokens=(getattr(usage, "completion_tokens", None) or 0),
            ),
            finish_reason=choice.finish_reason,
        )

    def _where(self) -> str:
        return f"model '{self._model}' at {self._endpoint}"

    def _unreachable(self, exc: openai.APIConnectionError) -> ModelError:
        if isinstance(exc, openai.APITimeoutError):
            message = (
                f"{self._where()} did not answer within {self._timeout:g}s "
                "(a slow model may need a larger Model.spec.options.timeoutSeconds)"
            )
        else:
            message = (
                f"cannot reach {self._where()}: {_connection_failure(exc)}; "
                "check Model.spec.endpoint"
            )
        return ModelError(message, code="E_MODEL_UNREACHABLE", retryable=True)

    def _status_error(self, exc: openai.APIStatusError) -> ModelError:
        status = exc.status_code
        detail = f"HTTP {status}: {_server_message(exc)}"
        if status in (401, 403):
            return ModelError(
                f"{self._where()} rejected the API key ({detail}); check Model.spec.apiKey",
                code="E_MODEL_AUTH",
            )
        if status == 429:
            retry_after = exc.response.headers.get("retry-after")
            hint = f" (retry after {retry_after}s)" if retry_after else ""
            return ModelError(
                f"{self._where()} is rate limiting{hint} ({detail})",
                code="E_MODEL_RATE_LIMITED",
                retryable=True,
            )
        if status == 408 or status >= 500:
            return ModelError(
                f"{self._where()} is unavailable ({detail})",
                code="E_MODEL_UNAVAILABLE",
                retryable=True,
            )
        hint = ""
        if status == 404:
            hint = (
                "; check Model.spec.model and Model.spec.endpoint (OpenAI-compatible servers "
                "usually serve under /v1)"
            )
        return ModelError(
            f"{self._where()} rejected the request ({detail}){hint}",
            code="E_MODEL_BAD_REQUEST",
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
        code="E_MODEL_AUTH",
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
                f"tool message {message.id} has no tool_call_id", code="E_MODEL_BAD_REQUEST"
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


def _connection_failure(exc: BaseException) -> str:
    # The SDK says only "Connection error." and the transport "All connection attempts
    # failed"; the OS error at the bottom of the chain is what tells the user what is wrong.
    root = exc
    for _ in range(10):
        inner = root.__cause__ or root.__context__
        if inner is None:
            break
        root = inner
    if isinstance(root, ConnectionRefusedError):
        return "connection refused (is the server running on that port?)"
    return str(root) or type(root).__name__


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


def _positive_number(options: dict[str, Any], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ModelError(
            f"Model.spec.options.{key} must be a positive number of seconds, got {value!r}",
            code="E_MODEL_CONFIG",
        )
    return float(value)


def _non_negative_int(options: dict[str, Any], key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelError(
            f"Model.spec.options.{key} must be a whole number >= 0, got {value!r}",
            code="E_MODEL_CONFIG",
        )
    return value


def _optional_str(options: dict[str, Any], key: str) -> str | None:
    value = options.get(key)
    return None if value is None else str(value)
