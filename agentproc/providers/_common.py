"""What the provider adapters share: the backend interface, errors that carry `retry-after`,
option parsing and transport-failure descriptions."""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agentproc.messages import ModelError, ModelReply, ModelRequest
from ipc.error_codes import ErrorCode

TextCallback = Callable[[str], None]
"""Receives each piece of reply text as a streaming model produces it."""

ChunkCallback = Callable[[], None]
"""Called for every stream event, text or not: what the first-token and idle timeouts watch."""

# Codes a provider raises besides the ones of the HTTP status mapping.
E_MODEL_TIMEOUT = ErrorCode.E_MODEL_TIMEOUT
E_MODEL_STREAM_INTERRUPTED = ErrorCode.E_MODEL_STREAM_INTERRUPTED


class Backend(Protocol):
    """One model at one endpoint, tried once per `complete`; `ResilientProvider` does the rest
    (retries, timeouts, fallbacks)."""

    label: str  # "model 'gpt-4o' at https://...", for messages and logs
    streaming: bool

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextCallback | None = None,
        on_chunk: ChunkCallback | None = None,
    ) -> ModelReply: ...

    async def aclose(self) -> None: ...


class ProviderError(ModelError):
    """A `ModelError` that also says how long the server asked us to wait (`retry-after`)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = ErrorCode.E_MODEL,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, retryable=retryable)
        self.retry_after = retry_after


# What providers say when the prompt is longer than the context window: OpenAI (and most
# OpenAI-compatible servers), Anthropic, google; matched in the lower-cased message.
_OVERFLOW_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the maximum number of tokens",
    "input token count",
)


def is_context_overflow(status: int, *texts: object) -> bool:
    """Whether a refused request (a 4xx) was refused for being longer than the model's
    context window, judged on the server's error code and message."""
    if not (400 <= status < 500) or status in (401, 403, 408, 429):
        return False
    text = " ".join(str(t) for t in texts if t).lower()
    return any(phrase in text for phrase in _OVERFLOW_PHRASES)


def context_overflow(label: str, detail: str) -> ModelError:
    return ModelError(
        f"{label} refused the request: the conversation is longer than its context window "
        f"({detail})",
        code=ErrorCode.E_CONTEXT_OVERFLOW,
    )


def retry_after_of(exc: BaseException) -> float | None:
    value = getattr(exc, "retry_after", None)
    return float(value) if isinstance(value, int | float) else None


def retry_after_seconds(
    headers: Mapping[str, str] | None, now: float | None = None
) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms` (OpenAI), else `retry-after` as
    seconds or as an HTTP date. None when absent or unreadable."""
    if not headers:
        return None
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        seconds = _finite(millis)
        if seconds is not None:
            return max(0.0, seconds / 1000.0)
    value = _header(headers, "retry-after")
    if value is None:
        return None
    seconds = _finite(value)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        # A plain dict from a test or a proxy may not be case-insensitive.
        for key, item in headers.items():
            if key.lower() == name:
                return item
    return value


def _finite(text: str) -> float | None:
    try:
        number = float(text.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def is_transport_error(exc: BaseException) -> bool:
    """An error of the HTTP stack under the SDKs (a connection reset, an incomplete chunked
    body), raised while a stream is read; the SDKs do not always wrap those."""
    if isinstance(exc, OSError | asyncio.IncompleteReadError | EOFError):
        return True
    root = type(exc).__module__.split(".")[0]
    return root in {"httpx", "httpx2", "httpcore", "h11", "h2", "anyio", "aiohttp"}


def root_cause(exc: BaseException) -> str:
    """The OS-level reason at the bottom of an exception chain, in words a user can act on."""
    root = exc
    for _ in range(10):
        inner = root.__cause__ or root.__context__
        if inner is None:
            break
        root = inner
    if isinstance(root, ConnectionRefusedError):
        return "connection refused (is the server running on that port?)"
    return str(root) or type(root).__name__


def positive_number(options: Mapping[str, Any], key: str, default: float, unit: str) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ModelError(
            f"Model.spec.options.{key} must be a positive number of {unit}, got {value!r}",
            code=ErrorCode.E_MODEL_CONFIG,
        )
    return float(value)


def non_negative_int(options: Mapping[str, Any], key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelError(
            f"Model.spec.options.{key} must be a whole number >= 0, got {value!r}",
            code=ErrorCode.E_MODEL_CONFIG,
        )
    return value


def optional_str(options: Mapping[str, Any], key: str) -> str | None:
    value = options.get(key)
    return None if value is None else str(value)


def headers_option(options: Mapping[str, Any]) -> dict[str, str]:
    headers = options.get("headers") or {}
    if not isinstance(headers, dict):
        raise ModelError(
            "Model.spec.options.headers must be a map of header name to value",
            code=ErrorCode.E_MODEL_CONFIG,
        )
    return {str(k): str(v) for k, v in headers.items()}


async def close_quietly(stream: Any) -> None:
    """Close an SDK stream; a stream whose connection already broke may fail to close, and that
    must not hide the error that broke it."""
    try:
        await stream.close()
    except Exception:  # noqa: BLE001 - best effort on an already failed stream
        pass


# Where a Model's base URL is set, for the hints; a provider is told another place when the URL
# came from elsewhere (a fallback's own field, or a base-URL variable: `providers._backend`).
ENDPOINT_FIELD = "Model.spec.endpoint"


def unreachable(
    label: str, exc: BaseException, *, timed_out: bool, endpoint_field: str = ENDPOINT_FIELD
) -> ModelError:
    """The model could not be reached, or did not answer in time: worth another try.
    `endpoint_field`: where its URL was set (a Model field, or a base-URL variable)."""
    if timed_out:
        message = (
            f"{label} did not answer in time (a slow model may need a larger "
            "Model.spec.options.timeoutSeconds)"
        )
    else:
        message = f"cannot reach {label}: {root_cause(exc)}; check {endpoint_field}"
    return ModelError(message, code=ErrorCode.E_MODEL_UNREACHABLE, retryable=True)


def interrupted(label: str, reason: str, count: int, unit: str) -> ModelError:
    """A stream that broke off after `count` chunks or events: worth another try."""
    return ModelError(
        f"{label} broke off the stream after {count} {unit}: {reason}",
        code=E_MODEL_STREAM_INTERRUPTED,
        retryable=True,
    )


def not_found_hint(endpoint_field: str = ENDPOINT_FIELD) -> str:
    return f"; check Model.spec.model and {endpoint_field}"


def status_error(
    label: str,
    status: int,
    detail: str,
    retry_after: float | None,
    *,
    overflow: bool,
    key_hint: str = "",
    bad_key: bool = False,
    hints: Mapping[int, str] | None = None,
    endpoint_field: str = ENDPOINT_FIELD,
) -> ModelError:
    """An HTTP error status as every provider reports it: a rejected key, a rate limit or an
    unavailable server (both worth another try, after `retry_after`), a context overflow, or
    else a bad request with the provider's `hints` for that status."""
    if status in (401, 403) or bad_key:
        return ModelError(
            f"{label} rejected the API key ({detail}); check Model.spec.apiKey{key_hint}",
            code=ErrorCode.E_MODEL_AUTH,
        )
    if status == 429:
        hint = f" (retry after {retry_after:g}s)" if retry_after is not None else ""
        return ProviderError(
            f"{label} is rate limiting{hint} ({detail})",
            code=ErrorCode.E_MODEL_RATE_LIMITED,
            retryable=True,
            retry_after=retry_after,
        )
    if status == 408 or status >= 500:
        state = "overloaded" if status == 529 else "unavailable"  # 529: Anthropic's overload
        return ProviderError(
            f"{label} is {state} ({detail})",
            code=ErrorCode.E_MODEL_UNAVAILABLE,
            retryable=True,
            retry_after=retry_after,
        )
    if overflow:
        return context_overflow(label, detail)
    hint = (hints or {}).get(status, not_found_hint(endpoint_field) if status == 404 else "")
    return ModelError(
        f"{label} rejected the request ({detail}){hint}", code=ErrorCode.E_MODEL_BAD_REQUEST
    )
