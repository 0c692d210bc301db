"""Retries, timeouts and model fallback around the provider adapters, the same for all of them.

The SDKs' own retries are off (`max_retries=0`); `ResilientProvider` does the retrying, so an
OpenAI-compatible server and Anthropic behave alike and every retry is logged. `make_provider`
returns one of these, so the turn loop only sees `complete()` and, at the end, a `ModelError`.

`Model.spec.options` (all optional; the defaults are the constants below):

- `maxRetries` (3): retries per model after the first attempt, for retryable failures only:
  429, 408, 5xx, 529 / overloaded, timeouts, connection errors and cut streams. Auth (401/403)
  and bad-request (400/404/413/...) errors are never retried and never fall back: trying again
  cannot fix a wrong key or a request the API rejects.
- `retryBaseDelayMs` (500), `retryMaxDelayMs` (30000): exponential backoff; retry n waits
  `base * 2^(n-1)` capped at the max, with jitter (between half of that and all of it).
- `retryAfterMaxMs` (60000): a server's `retry-after-ms` / `retry-after` (seconds or HTTP date)
  is honoured (the wait is at least that) up to this cap. A server asking for longer is not sat
  out: the model counts as failed at once (next fallback, or the error says so).
- `timeoutSeconds` (300): one attempt, from sending the request to the last byte of the reply.
- `firstTokenTimeoutSeconds` (60): streaming only, from the request to the first stream event.
- `streamIdleTimeoutSeconds` (60): streaming only, the longest silence between stream events.
- `fallbacks`: models to try in order when this one keeps failing (its retries used up on
  retryable errors). Each item is a model name (same provider, endpoint and key) or a map
  `{model, provider?, endpoint?, apiKeyEnv?, streaming?, options?}`: `provider` defaults to this
  Model's; with the same provider, `endpoint` and the API key default to this Model's too;
  otherwise `apiKeyEnv` names the environment variable that holds the fallback's key.
  `streaming` defaults to this Model's `capabilities.streaming`. A fallback's `options` are its
  own (request defaults, `headers`, ...) and may override the retry and timeout settings above,
  which it otherwise takes from this Model.
- `fallbackCooldownSeconds` (30): after a model has failed over, later calls try it last, after
  the rest of the chain, for this long; then it is first again.

Streaming text reaches `on_text` as it arrives. When a stream breaks and the retry repeats the
same text, the repeat is not shown twice; when the retry says something else, it is shown from
its start on a new line.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog

from agentproc.messages import ModelError, ModelReply, ModelRequest
from agentproc.providers._common import (
    E_MODEL_TIMEOUT,
    Backend,
    ChunkCallback,
    ProviderError,
    TextCallback,
    non_negative_int,
    retry_after_of,
)
from ipc.error_codes import ErrorCode

DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_BASE_DELAY_SECONDS = 0.5
DEFAULT_RETRY_MAX_DELAY_SECONDS = 30.0
DEFAULT_RETRY_AFTER_CAP_SECONDS = 60.0
DEFAULT_FIRST_TOKEN_TIMEOUT_SECONDS = 60.0
DEFAULT_STREAM_IDLE_TIMEOUT_SECONDS = 60.0
DEFAULT_CALL_TIMEOUT_SECONDS = 300.0
DEFAULT_FALLBACK_COOLDOWN_SECONDS = 30.0
# The SDK's own HTTP timeout sits a little past ours, so ours fires first and explains itself.
SDK_TIMEOUT_MARGIN_SECONDS = 5.0

# Options read here; the adapters must not send them to the API as request fields.
POLICY_OPTIONS = frozenset(
    {
        "maxRetries",
        "retryBaseDelayMs",
        "retryMaxDelayMs",
        "retryAfterMaxMs",
        "timeoutSeconds",
        "firstTokenTimeoutSeconds",
        "streamIdleTimeoutSeconds",
        "fallbacks",
        "fallbackCooldownSeconds",
        # read by `providers.keys`
        "keyCooldownSeconds",
        "keyAuthCooldownSeconds",
    }
)

_log = structlog.get_logger()


@dataclass(frozen=True)
class RetryPolicy:
    """How one model is retried and timed out. Durations in seconds."""

    max_retries: int = DEFAULT_MAX_RETRIES
    base_delay: float = DEFAULT_RETRY_BASE_DELAY_SECONDS
    max_delay: float = DEFAULT_RETRY_MAX_DELAY_SECONDS
    retry_after_cap: float = DEFAULT_RETRY_AFTER_CAP_SECONDS
    call_timeout: float = DEFAULT_CALL_TIMEOUT_SECONDS
    first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT_SECONDS
    stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT_SECONDS
    fallback_cooldown: float = DEFAULT_FALLBACK_COOLDOWN_SECONDS

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any], base: RetryPolicy | None = None
    ) -> RetryPolicy:
        """Read the options above; what is not set comes from `base` (else the defaults)."""
        base = base or cls()
        return cls(
            max_retries=non_negative_int(options, "maxRetries", base.max_retries),
            base_delay=_millis(options, "retryBaseDelayMs", base.base_delay, allow_zero=True),
            max_delay=_millis(options, "retryMaxDelayMs", base.max_delay, allow_zero=True),
            retry_after_cap=_millis(
                options, "retryAfterMaxMs", base.retry_after_cap, allow_zero=True
            ),
            call_timeout=_seconds(options, "timeoutSeconds", base.call_timeout),
            first_token_timeout=_seconds(
                options, "firstTokenTimeoutSeconds", base.first_token_timeout
            ),
            stream_idle_timeout=_seconds(
                options, "streamIdleTimeoutSeconds", base.stream_idle_timeout
            ),
            fallback_cooldown=_seconds(
                options, "fallbackCooldownSeconds", base.fallback_cooldown, allow_zero=True
            ),
        )

    @property
    def sdk_timeout(self) -> float:
        return self.call_timeout + SDK_TIMEOUT_MARGIN_SECONDS

    def backoff(self, retry: int, jitter: float) -> float:
        """The wait before retry number `retry` (1-based); `jitter` is uniform in [0, 1)."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** min(retry - 1, 60))
        return ceiling * (0.5 + jitter / 2.0)


class FallbackSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """One entry of `Model.spec.options.fallbacks`."""

    model: str
    provider: str | None = None
    endpoint: str | None = None
    api_key_env: str | None = None
    streaming: bool | None = None
    options: dict[str, Any] = {}


def parse_fallbacks(options: Mapping[str, Any]) -> list[FallbackSpec]:
    raw = options.get("fallbacks")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ModelError(
            "Model.spec.options.fallbacks must be a list of models, e.g. "
            "[{provider: anthropic, model: claude-sonnet-4-5, apiKeyEnv: ANTHROPIC_API_KEY}]",
            code=ErrorCode.E_MODEL_CONFIG,
        )
    fallbacks = []
    for index, item in enumerate(raw):
        where = f"Model.spec.options.fallbacks[{index}]"
        if isinstance(item, str):
            item = {"model": item}
        try:
            spec = msgspec.convert(item, FallbackSpec)
        except msgspec.ValidationError as exc:
            raise ModelError(
                f"{where}: {exc} (expected a model name or "
                "{model, provider?, endpoint?, apiKeyEnv?, streaming?, options?})",
                code=ErrorCode.E_MODEL_CONFIG,
            ) from None
        if "fallbacks" in spec.options:
            raise ModelError(
                f"{where}.options.fallbacks: a fallback cannot have fallbacks of its own; "
                "list every model in Model.spec.options.fallbacks, in order",
                code=ErrorCode.E_MODEL_CONFIG,
            )
        fallbacks.append(spec)
    return fallbacks


@dataclass
class _Link:
    backend: Backend
    policy: RetryPolicy
    cooldown_until: float = 0.0


class ResilientProvider:
    """A chain of backends (the Model, then its fallbacks) behind the `Provider` interface."""

    def __init__(
        self,
        chain: Sequence[tuple[Backend, RetryPolicy]],
        *,
        jitter: Callable[[], float] = random.random,
        sleep: Callable[[float], Any] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not chain:
            raise ValueError("a provider chain needs at least one model")
        self._links = [_Link(backend, policy) for backend, policy in chain]
        self._jitter = jitter
        self._sleep = sleep
        self._clock = clock

    async def aclose(self) -> None:
        for link in self._links:
            await link.backend.aclose()

    async def complete(
        self, request: ModelRequest, *, on_text: TextCallback | None = None
    ) -> ModelReply:
        sink = _TextSink(on_text)
        failures: list[tuple[_Link, ModelError]] = []
        order = self._order()
        for position, link in enumerate(order):
            try:
                return await self._with_retries(link, request, sink)
            except ModelError as exc:
                if not exc.retryable or position == len(order) - 1:
                    if not failures:
                        raise
                    failures.append((link, exc))
                    raise _summary(failures, exc) from exc
                failures.append((link, exc))
                link.cooldown_until = self._clock() + link.policy.fallback_cooldown
                _log.warning(
                    "model keeps failing, falling back",
                    model=link.backend.label,
                    fallback=order[position + 1].backend.label,
                    code=exc.code,
                    error=str(exc),
                )
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _order(self) -> list[_Link]:
        """The chain, with the models cooling down after a failover moved to its end."""
        now = self._clock()
        ready = [link for link in self._links if link.cooldown_until <= now]
        cooling = [link for link in self._links if link.cooldown_until > now]
        if cooling and ready:
            _log.info(
                "trying models in cooldown last",
                models=[link.backend.label for link in cooling],
            )
        return ready + cooling

    async def _with_retries(
        self, link: _Link, request: ModelRequest, sink: _TextSink
    ) -> ModelReply:
        policy = link.policy
        attempts = policy.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return await self._attempt(link, request, sink)
            except ModelError as exc:
                if not exc.retryable or attempt == attempts:
                    raise
                retry_after = retry_after_of(exc)
                if retry_after is not None and retry_after > policy.retry_after_cap:
                    raise ProviderError(
                        f"{exc}; the server asked to retry after {retry_after:g}s, longer than "
                        f"Model.spec.options.retryAfterMaxMs ({policy.retry_after_cap * 1000:g})",
                        code=exc.code,
                        retryable=True,
                        retry_after=retry_after,
                    ) from exc
                delay = max(policy.backoff(attempt, self._jitter()), retry_after or 0.0)
                _log.warning(
                    "model call failed, retrying",
                    model=link.backend.label,
                    attempt=attempt,
                    attempts=attempts,
                    delay=round(delay, 3),
                    code=exc.code,
                    error=str(exc),
                )
                await self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(self, link: _Link, request: ModelRequest, sink: _TextSink) -> ModelReply:
        backend, policy = link.backend, link.policy
        loop = asyncio.get_running_loop()
        start = loop.time()
        call_deadline = start + policy.call_timeout
        watching = "call"
        deadline = call_deadline
        if backend.streaming and start + policy.first_token_timeout < call_deadline:
            watching, deadline = "first", start + policy.first_token_timeout
        scope = asyncio.timeout_at(deadline)

        def on_chunk() -> None:
            nonlocal watching
            idle_deadline = loop.time() + policy.stream_idle_timeout
            if idle_deadline < call_deadline:
                watching = "idle"
                scope.reschedule(idle_deadline)
            elif watching != "call":
                watching = "call"
                scope.reschedule(call_deadline)

        sink.begin_attempt()
        chunk_callback: ChunkCallback | None = on_chunk if backend.streaming else None
        try:
            async with scope:
                return await backend.complete(
                    request, on_text=sink.write if sink.wanted else None, on_chunk=chunk_callback
                )
        except TimeoutError:
            if not scope.expired():
                raise
            raise ProviderError(
                _timeout_message(backend, policy, watching), code=E_MODEL_TIMEOUT, retryable=True
            ) from None


def _timeout_message(backend: Backend, policy: RetryPolicy, watching: str) -> str:
    if watching == "first":
        return (
            f"{backend.label} sent nothing within {policy.first_token_timeout:g}s "
            "(Model.spec.options.firstTokenTimeoutSeconds)"
        )
    if watching == "idle":
        return (
            f"{backend.label} stopped streaming: nothing for {policy.stream_idle_timeout:g}s "
            "(Model.spec.options.streamIdleTimeoutSeconds)"
        )
    return (
        f"{backend.label} did not finish answering within {policy.call_timeout:g}s (a slow "
        "model may need a larger Model.spec.options.timeoutSeconds)"
    )


def _summary(failures: list[tuple[_Link, ModelError]], last: ModelError) -> ModelError:
    parts = "; ".join(
        f"{n}) {link.backend.label}: [{exc.code}] {exc}"
        for n, (link, exc) in enumerate(failures, 1)
    )
    return ModelError(
        f"all {len(failures)} models failed: {parts}", code=last.code, retryable=last.retryable
    )


class _TextSink:
    """Passes streamed text to the caller once, even when a broken stream is retried."""

    def __init__(self, callback: TextCallback | None) -> None:
        self._callback = callback
        self._shown = ""  # the text of the attempt the caller is looking at
        self._previous = ""
        self._current = ""
        self._replaying = False

    @property
    def wanted(self) -> bool:
        return self._callback is not None

    def begin_attempt(self) -> None:
        self._previous = self._shown
        self._current = ""
        self._replaying = bool(self._previous)

    def write(self, delta: str) -> None:
        if not delta:
            return
        self._current += delta
        if not self._replaying:
            self._shown = self._current
            self._emit(delta)
            return
        previous, current = self._previous, self._current
        if len(current) <= len(previous) and previous.startswith(current):
            return  # the retry repeats what is already on screen
        self._replaying = False
        self._shown = current
        if current.startswith(previous):
            self._emit(current[len(previous) :])
        else:
            self._emit("\n" + current)

    def _emit(self, text: str) -> None:
        callback = self._callback
        if callback is None:
            return
        try:
            callback(text)
        except Exception as exc:  # noqa: BLE001 - a broken display must not fail the model call
            self._callback = None
            _log.warning("streaming text callback failed; no more text is shown", error=repr(exc))


def _millis(options: Mapping[str, Any], key: str, default: float, *, allow_zero: bool) -> float:
    return _number(options, key, default * 1000.0, "milliseconds", allow_zero) / 1000.0


def _seconds(
    options: Mapping[str, Any], key: str, default: float, *, allow_zero: bool = False
) -> float:
    return _number(options, key, default, "seconds", allow_zero)


def _number(
    options: Mapping[str, Any], key: str, default: float, unit: str, allow_zero: bool
) -> float:
    value = options.get(key, default)
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and (value >= 0 if allow_zero else value > 0)
        and value != float("inf")
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ModelError(
            f"Model.spec.options.{key} must be a number of {unit} {bound}, got {value!r}",
            code=ErrorCode.E_MODEL_CONFIG,
        )
    return float(value)
