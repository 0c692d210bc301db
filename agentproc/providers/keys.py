"""Auth profiles: one model reached with several API keys (`Model.spec.apiKey` + `apiKeys`).

A key the server rate-limits (429) or rejects (401/403) cools down, and the same request goes
at once to the next key that is not cooling down; only when every key has failed does the error
reach `ResilientProvider`, whose retries and fallback models come after. The key that last
answered stays first, so a healthy key is not left for a cooled-down one.

`Model.spec.options`:

- `keyCooldownSeconds` (60): how long a rate-limited key rests (longer if the server's
  `retry-after` says so).
- `keyAuthCooldownSeconds` (3600): how long a rejected key rests; a revoked key stays revoked,
  but a key fixed in the environment comes back after a restart of the agent anyway.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from agentproc.messages import ModelError, ModelReply, ModelRequest
from agentproc.providers._common import (
    Backend,
    ChunkCallback,
    ProviderError,
    TextCallback,
    positive_number,
    retry_after_of,
)
from ipc.error_codes import ErrorCode

KEY_OPTIONS = frozenset({"keyCooldownSeconds", "keyAuthCooldownSeconds"})
DEFAULT_KEY_COOLDOWN_SECONDS = 60.0
DEFAULT_KEY_AUTH_COOLDOWN_SECONDS = 3600.0

_ROTATED = frozenset({ErrorCode.E_MODEL_AUTH, ErrorCode.E_MODEL_RATE_LIMITED})

_log = structlog.get_logger()


class KeyRotation:
    """A `Backend` over one backend per key of the same model."""

    def __init__(
        self,
        backends: Sequence[Backend],
        options: Mapping[str, Any],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backends = list(backends)
        self.label = self._backends[0].label
        self.streaming = self._backends[0].streaming
        self._rate_cooldown = positive_number(
            options, "keyCooldownSeconds", DEFAULT_KEY_COOLDOWN_SECONDS, "seconds"
        )
        self._auth_cooldown = positive_number(
            options, "keyAuthCooldownSeconds", DEFAULT_KEY_AUTH_COOLDOWN_SECONDS, "seconds"
        )
        self._until = [0.0] * len(self._backends)
        self._current = 0
        self._clock = clock

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextCallback | None = None,
        on_chunk: ChunkCallback | None = None,
    ) -> ModelReply:
        count = len(self._backends)
        now = self._clock()
        rotation = [(self._current + step) % count for step in range(count)]
        order = [index for index in rotation if self._until[index] <= now]
        if not order:
            # Every key is resting: the one free soonest is the best chance.
            order = [min(rotation, key=lambda index: self._until[index])]
        last: ModelError | None = None
        for index in order:
            try:
                reply = await self._backends[index].complete(
                    request, on_text=on_text, on_chunk=on_chunk
                )
            except ModelError as exc:
                if exc.code not in _ROTATED:
                    raise
                auth = exc.code == ErrorCode.E_MODEL_AUTH
                rest = (
                    self._auth_cooldown
                    if auth
                    else max(self._rate_cooldown, retry_after_of(exc) or 0.0)
                )
                self._until[index] = self._clock() + rest
                _log.warning(
                    "model API key cooling down",
                    model=self.label,
                    key=f"{index + 1} of {count}",
                    code=exc.code,
                    seconds=rest,
                )
                last = exc
                continue
            self._current = index
            return reply
        assert last is not None
        raise _all_failed(last, count, len(order))

    async def aclose(self) -> None:
        for backend in self._backends:
            await backend.aclose()


def _all_failed(last: ModelError, count: int, tried: int) -> ModelError:
    if tried == count:
        where = f"with each of its {count} API keys"
    else:
        where = f"and its other {count - tried} API keys are cooling down"
    message = f"{last} ({where}; Model.spec.apiKeys)"
    if isinstance(last, ProviderError):
        return ProviderError(
            message, code=last.code, retryable=last.retryable, retry_after=last.retry_after
        )
    return ModelError(message, code=last.code, retryable=last.retryable)
