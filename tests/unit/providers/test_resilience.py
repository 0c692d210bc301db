"""ResilientProvider with scripted in-memory backends: backoff, retry-after, timeouts, streaming
text across retries, fallback order and cooldown, option checking."""

from __future__ import annotations

import asyncio
import email.utils
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from agentproc.messages import Message, ModelError, ModelReply, ModelRequest
from agentproc.providers import make_provider
from agentproc.providers._common import (
    ChunkCallback,
    ProviderError,
    TextCallback,
    retry_after_seconds,
)
from agentproc.providers.resilience import (
    DEFAULT_CALL_TIMEOUT_SECONDS,
    DEFAULT_FIRST_TOKEN_TIMEOUT_SECONDS,
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_AFTER_CAP_SECONDS,
    DEFAULT_RETRY_BASE_DELAY_SECONDS,
    DEFAULT_RETRY_MAX_DELAY_SECONDS,
    ResilientProvider,
    RetryPolicy,
    parse_fallbacks,
)
from goondan.bundle.model import ModelSpec

REQUEST = ModelRequest(messages=[Message(id="u", role="user", content="hi")], tools=[])

Step = Callable[[TextCallback | None, ChunkCallback | None], Awaitable[ModelReply]]


class ScriptedBackend:
    """Plays one scripted step per call: a reply, an error, or a coroutine (for streams)."""

    def __init__(self, label: str, *steps: ModelReply | ModelError | Step, streaming: bool = False):
        self.label = label
        self.streaming = streaming
        self.steps = list(steps)
        self.calls = 0
        self.closed = False

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextCallback | None = None,
        on_chunk: ChunkCallback | None = None,
    ) -> ModelReply:
        self.calls += 1
        step = self.steps.pop(0)
        if isinstance(step, ModelError):
            raise step
        if isinstance(step, ModelReply):
            return step
        return await step(on_text, on_chunk)

    async def aclose(self) -> None:
        self.closed = True


def reply(text: str) -> ModelReply:
    return ModelReply(text=text, finish_reason="stop")


def unavailable(retry_after: float | None = None) -> ProviderError:
    return ProviderError(
        "down", code="E_MODEL_UNAVAILABLE", retryable=True, retry_after=retry_after
    )


def stream(*pieces: str, fail: bool = False, pause: float = 0.0, first_pause: bool = True) -> Step:
    async def play(on_text: TextCallback | None, on_chunk: ChunkCallback | None) -> ModelReply:
        for index, piece in enumerate(pieces):
            if pause and (index or first_pause):
                await asyncio.sleep(pause)
            if on_chunk:
                on_chunk()
            if on_text:
                on_text(piece)
        if fail:
            raise ModelError("cut", code="E_MODEL_STREAM_INTERRUPTED", retryable=True)
        return reply("".join(pieces))

    return play


class Recorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)


def resilient(
    *chain: tuple[ScriptedBackend, RetryPolicy],
    jitter: float = 0.5,
    recorder: Recorder | None = None,
    clock: Callable[[], float] | None = None,
) -> ResilientProvider:
    return ResilientProvider(
        chain,
        jitter=lambda: jitter,
        sleep=(recorder or Recorder()).sleep,
        clock=clock or (lambda: 0.0),
    )


def test_defaults_live_in_named_constants() -> None:
    policy = RetryPolicy()
    assert (policy.max_retries, policy.base_delay, policy.max_delay) == (3, 0.5, 30.0)
    assert (policy.retry_after_cap, policy.first_token_timeout, policy.call_timeout) == (
        60.0,
        60.0,
        300.0,
    )
    assert policy == RetryPolicy(
        max_retries=DEFAULT_MAX_RETRIES,
        base_delay=DEFAULT_RETRY_BASE_DELAY_SECONDS,
        max_delay=DEFAULT_RETRY_MAX_DELAY_SECONDS,
        retry_after_cap=DEFAULT_RETRY_AFTER_CAP_SECONDS,
        first_token_timeout=DEFAULT_FIRST_TOKEN_TIMEOUT_SECONDS,
        call_timeout=DEFAULT_CALL_TIMEOUT_SECONDS,
    )


def test_options_override_the_defaults() -> None:
    policy = RetryPolicy.from_options(
        {
            "maxRetries": 5,
            "retryBaseDelayMs": 100,
            "retryMaxDelayMs": 2000,
            "retryAfterMaxMs": 10000,
            "firstTokenTimeoutSeconds": 7,
            "streamIdleTimeoutSeconds": 8,
            "timeoutSeconds": 90,
            "fallbackCooldownSeconds": 0,
        }
    )
    assert policy == RetryPolicy(5, 0.1, 2.0, 10.0, 90.0, 7.0, 8.0, 0.0)
    # A fallback's own options override only what they name.
    assert RetryPolicy.from_options({"maxRetries": 1}, base=policy).call_timeout == 90.0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("maxRetries", -1),
        ("maxRetries", 1.5),
        ("timeoutSeconds", 0),
        ("firstTokenTimeoutSeconds", "60"),
        ("retryBaseDelayMs", -5),
        ("retryMaxDelayMs", True),
    ],
)
def test_bad_options_name_the_field(key: str, value: Any) -> None:
    with pytest.raises(ModelError) as caught:
        RetryPolicy.from_options({key: value})
    assert caught.value.code == "E_MODEL_CONFIG"
    assert f"Model.spec.options.{key}" in str(caught.value)


def test_backoff_grows_exponentially_with_jitter_up_to_the_max() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0)
    assert [policy.backoff(n, 0.999999) for n in (1, 2, 3, 4, 5)] == pytest.approx(
        [0.5, 1.0, 2.0, 4.0, 4.0], rel=1e-5
    )
    # Jitter keeps between half and all of the exponential delay.
    assert policy.backoff(3, 0.0) == 1.0
    assert policy.backoff(100, 0.0) == 2.0


async def test_retryable_errors_are_retried_with_backoff() -> None:
    backend = ScriptedBackend("m", unavailable(), unavailable(), reply("ok"))
    recorder = Recorder()

    with capture_logs() as logs:
        result = await resilient(
            (backend, RetryPolicy(base_delay=1.0)), recorder=recorder, jitter=0.0
        ).complete(REQUEST)

    assert result.text == "ok"
    assert recorder.delays == [0.5, 1.0]
    assert [(e["attempt"], e["attempts"], e["code"]) for e in logs] == [
        (1, 4, "E_MODEL_UNAVAILABLE"),
        (2, 4, "E_MODEL_UNAVAILABLE"),
    ]


async def test_retry_after_wins_over_a_shorter_backoff() -> None:
    backend = ScriptedBackend("m", unavailable(retry_after=7.0), reply("ok"))
    recorder = Recorder()

    await resilient((backend, RetryPolicy()), recorder=recorder).complete(REQUEST)

    assert recorder.delays == [7.0]


async def test_retry_after_beyond_the_cap_fails_at_once() -> None:
    backend = ScriptedBackend("m", unavailable(retry_after=120.0), reply("never"))
    recorder = Recorder()

    with pytest.raises(ModelError) as caught:
        await resilient((backend, RetryPolicy()), recorder=recorder).complete(REQUEST)

    assert "retryAfterMaxMs" in str(caught.value)
    assert recorder.delays == [] and backend.calls == 1


async def test_non_retryable_errors_are_raised_as_they_are() -> None:
    error = ModelError("bad key", code="E_MODEL_AUTH")
    backend = ScriptedBackend("m", error)

    with pytest.raises(ModelError) as caught:
        await resilient((backend, RetryPolicy())).complete(REQUEST)

    assert caught.value is error and backend.calls == 1


async def test_a_retried_stream_that_repeats_itself_is_shown_once() -> None:
    backend = ScriptedBackend(
        "m", stream("Hel", "lo", fail=True), stream("Hel", "lo", " world"), streaming=True
    )
    seen: list[str] = []

    result = await resilient((backend, RetryPolicy())).complete(REQUEST, on_text=seen.append)

    assert result.text == "Hello world"
    assert seen == ["Hel", "lo", " world"]


async def test_a_retried_stream_that_says_something_else_starts_a_new_line() -> None:
    backend = ScriptedBackend(
        "m", stream("Sure, ", "the", fail=True), stream("Sure, ", "a ", "cat"), streaming=True
    )
    seen: list[str] = []

    await resilient((backend, RetryPolicy())).complete(REQUEST, on_text=seen.append)

    assert "".join(seen) == "Sure, the\nSure, a cat"


async def test_a_failing_text_callback_does_not_fail_the_call() -> None:
    backend = ScriptedBackend("m", stream("a", "b"), streaming=True)

    def broken(text: str) -> None:
        raise BrokenPipeError("terminal went away")

    with capture_logs() as logs:
        result = await resilient((backend, RetryPolicy())).complete(REQUEST, on_text=broken)

    assert result.text == "ab"
    assert [e["event"] for e in logs] == ["streaming text callback failed; no more text is shown"]


async def test_first_token_timeout_then_idle_timeout() -> None:
    policy = RetryPolicy(max_retries=0, first_token_timeout=0.1, stream_idle_timeout=1.0)
    backend = ScriptedBackend("m", stream("a", pause=0.3), streaming=True)

    with pytest.raises(ModelError) as caught:
        await resilient((backend, policy)).complete(REQUEST)

    assert caught.value.code == "E_MODEL_TIMEOUT"
    assert "firstTokenTimeoutSeconds" in str(caught.value)

    # The first piece at once, then one every 0.2 s: each gap within the idle timeout, so the
    # stream completes though it takes longer than the first-token timeout.
    policy = RetryPolicy(max_retries=0, first_token_timeout=0.1, stream_idle_timeout=1.0)
    backend = ScriptedBackend(
        "m", stream("a", "b", "c", pause=0.2, first_pause=False), streaming=True
    )
    assert (await resilient((backend, policy)).complete(REQUEST)).text == "abc"


async def test_stream_stalling_after_its_first_chunk_hits_the_idle_timeout() -> None:
    async def stall(on_text: TextCallback | None, on_chunk: ChunkCallback | None) -> ModelReply:
        assert on_chunk is not None
        on_chunk()
        await asyncio.sleep(1.0)
        return reply("late")

    backend = ScriptedBackend("m", stall, streaming=True)
    policy = RetryPolicy(max_retries=0, first_token_timeout=0.5, stream_idle_timeout=0.1)

    with pytest.raises(ModelError) as caught:
        await resilient((backend, policy)).complete(REQUEST)

    assert caught.value.code == "E_MODEL_TIMEOUT"
    assert "streamIdleTimeoutSeconds" in str(caught.value)


async def test_fallback_then_cooldown_then_primary_again() -> None:
    now = [0.0]
    primary = ScriptedBackend("primary", unavailable(), reply("primary back"))
    backup = ScriptedBackend("backup", reply("backup 1"), reply("backup 2"))
    policy = RetryPolicy(max_retries=0, fallback_cooldown=30.0)
    provider = resilient((primary, policy), (backup, policy), clock=lambda: now[0])

    assert (await provider.complete(REQUEST)).text == "backup 1"
    now[0] = 10.0
    assert (await provider.complete(REQUEST)).text == "backup 2"  # primary cooling down
    assert primary.calls == 1
    now[0] = 31.0
    assert (await provider.complete(REQUEST)).text == "primary back"

    await provider.aclose()
    assert primary.closed and backup.closed


async def test_a_model_in_cooldown_is_still_tried_after_the_others() -> None:
    now = [0.0]
    primary = ScriptedBackend("primary", unavailable(), reply("primary recovered"))
    backup = ScriptedBackend("backup", reply("backup"), unavailable())
    policy = RetryPolicy(max_retries=0)
    provider = resilient((primary, policy), (backup, policy), clock=lambda: now[0])

    await provider.complete(REQUEST)
    now[0] = 1.0

    assert (await provider.complete(REQUEST)).text == "primary recovered"


async def test_a_fallback_auth_error_ends_the_chain_with_a_summary() -> None:
    primary = ScriptedBackend("primary", unavailable())
    backup = ScriptedBackend("backup", ModelError("no key", code="E_MODEL_AUTH"))
    third = ScriptedBackend("third", reply("never"))
    policy = RetryPolicy(max_retries=0)

    with pytest.raises(ModelError) as caught:
        await resilient((primary, policy), (backup, policy), (third, policy)).complete(REQUEST)

    assert caught.value.code == "E_MODEL_AUTH" and not caught.value.retryable
    assert "1) primary: [E_MODEL_UNAVAILABLE] down; 2) backup: [E_MODEL_AUTH] no key" in str(
        caught.value
    )
    assert third.calls == 0


def test_retry_after_header_forms() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"Retry-After": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": date}, now=now) == pytest.approx(30.0)
    assert (
        retry_after_seconds({"retry-after": email.utils.formatdate(now - 5, usegmt=True)}, now=now)
        == 0.0
    )
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "inf"}) is None
    assert retry_after_seconds({}) is None and retry_after_seconds(None) is None


def test_fallbacks_are_checked() -> None:
    assert [f.model for f in parse_fallbacks({"fallbacks": ["a", {"model": "b"}]})] == ["a", "b"]
    assert parse_fallbacks({}) == []
    for bad, words in [
        ({"fallbacks": "gpt-4o"}, "must be a list"),
        ({"fallbacks": [{"model": "x", "apikey": "y"}]}, "fallbacks[0]"),
        ({"fallbacks": [{"provider": "openai"}]}, "fallbacks[0]"),
        ({"fallbacks": [{"model": "x", "options": {"fallbacks": ["y"]}}]}, "cannot have"),
    ]:
        with pytest.raises(ModelError) as caught:
            parse_fallbacks(bad)  # type: ignore[arg-type]  # malformed on purpose
        assert caught.value.code == "E_MODEL_CONFIG"
        assert words in str(caught.value)


def test_fallback_key_variable_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOONDAN_TEST_UNSET_KEY", raising=False)
    spec = ModelSpec(
        provider="openai",
        model="m",
        endpoint="http://127.0.0.1:1/v1",
        options={
            "fallbacks": [
                {"provider": "anthropic", "model": "c", "apiKeyEnv": "GOONDAN_TEST_UNSET_KEY"}
            ]
        },
    )

    with pytest.raises(ModelError) as caught:
        make_provider(spec, "k")

    assert caught.value.code == "E_MODEL_AUTH"
    assert "GOONDAN_TEST_UNSET_KEY is not set" in str(caught.value)


def test_cross_provider_fallback_without_a_key_says_how_to_give_one() -> None:
    spec = ModelSpec(
        provider="openai",
        model="m",
        endpoint="http://127.0.0.1:1/v1",
        options={"fallbacks": [{"provider": "anthropic", "model": "c"}]},
    )

    with pytest.raises(ModelError) as caught:
        make_provider(spec, "k")

    assert caught.value.code == "E_MODEL_AUTH"
    assert "fallbacks[0]" in str(caught.value) and "apiKeyEnv: ANTHROPIC_API_KEY" in str(
        caught.value
    )


def test_unknown_fallback_provider() -> None:
    spec = ModelSpec(
        provider="openai",
        model="m",
        endpoint="http://127.0.0.1:1/v1",
        options={"fallbacks": [{"provider": "gemini", "model": "g"}]},
    )

    with pytest.raises(ModelError) as caught:
        make_provider(spec, "k")

    assert caught.value.code == "E_MODEL_CONFIG" and "gemini" in str(caught.value)


async def test_an_unreachable_model_can_fall_back_to_the_scripted_one() -> None:
    spec = ModelSpec(
        provider="openai",
        model="m",
        endpoint="http://127.0.0.1:9/v1",  # discard port: nothing listens
        options={
            "maxRetries": 0,
            "fallbacks": [
                {
                    "provider": "scripted",
                    "model": "offline",
                    "options": {"default": "offline: {{input}}"},
                }
            ],
        },
    )
    provider = make_provider(spec, None)
    try:
        with capture_logs():
            result = await provider.complete(REQUEST)
    finally:
        await provider.aclose()

    assert result.text == "offline: hi"
