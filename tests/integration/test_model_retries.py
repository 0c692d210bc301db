"""Retries, backoff, `retry-after`, timeouts and model fallback over real HTTP, for both the
`openai` and the `anthropic` provider: the same behaviour, since the retry loop is ours."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import pytest
from structlog.testing import capture_logs

from agentproc.messages import ModelError
from agentproc.providers import Provider, make_provider
from goondan.bundle.model import ModelCapabilities, ModelSpec
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.provider_testkit import ask, complete

KEY = "sk-test"
# Fast retries for tests: 1 ms base delay (the backoff itself is unit-tested).
FAST = {"retryBaseDelayMs": 1, "retryMaxDelayMs": 20}


@dataclass
class Fake:
    provider: str
    server: FakeOpenAIServer | FakeAnthropicServer

    @property
    def endpoint(self) -> str:
        return self.server.base_url

    def spec(
        self, *, streaming: bool = False, model: str = "m-primary", **options: Any
    ) -> ModelSpec:
        return ModelSpec(
            provider=self.provider,
            model=model,
            endpoint=self.endpoint,
            options={**FAST, **options},
            capabilities=ModelCapabilities(streaming=streaming),
        )

    def provider_for(self, *, streaming: bool = False, **options: Any) -> Provider:
        return make_provider(self.spec(streaming=streaming, **options), KEY)


@pytest.fixture(params=["openai", "anthropic"])
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[Fake]:
    server: FakeOpenAIServer | FakeAnthropicServer
    server = FakeOpenAIServer() if request.param == "openai" else FakeAnthropicServer()
    async with server:
        yield Fake(request.param, server)


def retries(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == "model call failed, retrying"]


async def test_429_retry_after_is_honoured_then_success(fake: Fake) -> None:
    # OpenAI sends retry-after-ms, Anthropic whole seconds: both are read.
    if fake.provider == "openai":
        headers, wait = {"retry-after-ms": "400"}, 0.4
    else:
        headers, wait = {"retry-after": "1"}, 1.0
    fake.server.queue_error(429, "slow down", headers=headers)
    fake.server.queue_reply(text="finally")

    with capture_logs() as logs:
        reply = await complete(fake.provider_for())

    assert reply.text == "finally"
    first, second = fake.server.request_times
    assert second - first >= wait * 0.95  # not the 1 ms backoff: the server's word
    [logged] = retries(logs)
    assert (logged["attempt"], logged["code"]) == (1, "E_MODEL_RATE_LIMITED")
    assert logged["delay"] >= wait


@pytest.mark.parametrize("status", [500, 503, 529])
async def test_server_errors_are_retried_then_succeed(fake: Fake, status: int) -> None:
    fake.server.queue_error(status, "Overloaded" if status == 529 else "boom")
    fake.server.queue_error(status, "again")
    fake.server.queue_reply(text="ok now")

    with capture_logs() as logs:
        reply = await complete(fake.provider_for())

    assert reply.text == "ok now"
    assert len(fake.server.requests) == 3
    assert [(e["attempt"], e["code"]) for e in retries(logs)] == [
        (1, "E_MODEL_UNAVAILABLE"),
        (2, "E_MODEL_UNAVAILABLE"),
    ]


async def test_retries_exhausted_is_an_error(fake: Fake) -> None:
    for _ in range(3):
        fake.server.queue_error(503, "still down")

    with pytest.raises(ModelError) as caught:
        await complete(fake.provider_for(maxRetries=2))

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_UNAVAILABLE", True)
    assert "still down" in str(caught.value)
    assert len(fake.server.requests) == 3  # 1 + maxRetries


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_auth_and_bad_request_errors_are_not_retried(fake: Fake, status: int) -> None:
    fake.server.queue_error(status, "no")

    with pytest.raises(ModelError) as caught:
        await complete(fake.provider_for(maxRetries=3))

    expected = "E_MODEL_AUTH" if status in (401, 403) else "E_MODEL_BAD_REQUEST"
    assert (caught.value.code, caught.value.retryable) == (expected, False)
    assert len(fake.server.requests) == 1


async def test_retry_after_beyond_the_cap_is_not_waited_out(fake: Fake) -> None:
    fake.server.queue_error(429, "quota", headers={"retry-after": "3600"})
    fake.server.queue_reply(text="never asked for")

    provider = fake.provider_for(maxRetries=3, retryAfterMaxMs=5000)
    with capture_logs() as logs, pytest.raises(ModelError) as caught:
        await complete(provider)

    assert retries(logs) == []  # no wait begun: every retry's wait is logged first
    assert caught.value.code == "E_MODEL_RATE_LIMITED"
    assert "retryAfterMaxMs" in str(caught.value) and "3600" in str(caught.value)
    assert len(fake.server.requests) == 1


async def test_cut_stream_is_retried_and_text_is_not_shown_twice(fake: Fake) -> None:
    fake.server.queue_reply(chunks=["The ", "answer ", "is ", "42."], cut_after=4)
    fake.server.queue_reply(chunks=["The ", "answer ", "is ", "42."])
    seen: list[str] = []

    with capture_logs() as logs:
        reply = await complete(fake.provider_for(streaming=True), seen=seen)

    assert reply.text == "The answer is 42."
    assert "".join(seen) == "The answer is 42."
    assert [e["code"] for e in retries(logs)] == ["E_MODEL_STREAM_INTERRUPTED"]
    assert len(fake.server.requests) == 2


async def test_first_token_timeout(fake: Fake) -> None:
    fake.server.queue_reply(text="too late", first_chunk_delay_seconds=3)

    provider = fake.provider_for(streaming=True, maxRetries=0, firstTokenTimeoutSeconds=0.3)
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        await complete(provider)

    assert time.monotonic() - started < 2
    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_TIMEOUT", True)
    assert "firstTokenTimeoutSeconds" in str(caught.value)


async def test_first_token_timeout_is_retried(fake: Fake) -> None:
    fake.server.queue_reply(text="too late", first_chunk_delay_seconds=3)
    fake.server.queue_reply(text="prompt")

    reply = await complete(
        fake.provider_for(streaming=True, maxRetries=1, firstTokenTimeoutSeconds=0.6)
    )

    assert reply.text == "prompt"


async def test_first_token_timeout_is_separate_from_the_call_timeout(fake: Fake) -> None:
    # The first event in time, but the call as a whole over timeoutSeconds.
    fake.server.queue_reply(text="slow", first_chunk_delay_seconds=0.6)

    with pytest.raises(ModelError) as caught:
        await complete(
            fake.provider_for(
                streaming=True, maxRetries=0, firstTokenTimeoutSeconds=5, timeoutSeconds=0.3
            )
        )

    assert caught.value.code == "E_MODEL_TIMEOUT"
    assert "timeoutSeconds" in str(caught.value)
    assert "firstTokenTimeoutSeconds" not in str(caught.value)


async def test_first_token_timeout_does_not_apply_without_streaming(fake: Fake) -> None:
    fake.server.queue_reply(text="considered", delay_seconds=0.5)

    reply = await complete(fake.provider_for(maxRetries=0, firstTokenTimeoutSeconds=0.1))

    assert reply.text == "considered"


async def test_fallback_model_is_used_when_the_primary_keeps_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Primary on an OpenAI-compatible server, fallback on Anthropic with its own key.
    monkeypatch.setenv("GOONDAN_TEST_FALLBACK_KEY", "sk-ant-fallback")
    async with FakeOpenAIServer() as primary, FakeAnthropicServer() as backup:
        for _ in range(2):
            primary.queue_error(503, "primary down")
        backup.queue_reply(text="from the fallback")
        spec = ModelSpec(
            provider="openai",
            model="gpt-primary",
            endpoint=primary.base_url,
            options={
                **FAST,
                "maxRetries": 1,
                "fallbacks": [
                    {
                        "provider": "anthropic",
                        "model": "claude-backup",
                        "endpoint": backup.base_url,
                        "apiKeyEnv": "GOONDAN_TEST_FALLBACK_KEY",
                    }
                ],
            },
        )
        provider = make_provider(spec, KEY)
        try:
            with capture_logs() as logs:
                first = await provider.complete(ask("one"))
                # The primary is cooling down: the next call starts at the fallback.
                second = await provider.complete(ask("two"))
        finally:
            await provider.aclose()

        assert first.text == "from the fallback"
        assert second.text == "echo: two"
        assert len(primary.requests) == 2  # 1 + maxRetries, then no more while cooling down
        assert [r["model"] for r in backup.requests] == ["claude-backup", "claude-backup"]
        assert backup.api_keys == ["sk-ant-fallback", "sk-ant-fallback"]
        [fell_back] = [e for e in logs if e["event"] == "model keeps failing, falling back"]
        assert "gpt-primary" in fell_back["model"] and "claude-backup" in fell_back["fallback"]


async def test_same_provider_fallback_by_model_name(fake: Fake) -> None:
    fake.server.queue_error(529, "Overloaded")
    fake.server.queue_reply(text="smaller model")

    reply = await complete(fake.provider_for(maxRetries=0, fallbacks=["m-small"]))

    assert reply.text == "smaller model"
    assert [r["model"] for r in fake.server.requests] == ["m-primary", "m-small"]


async def test_every_model_failing_names_each_failure(fake: Fake) -> None:
    fake.server.queue_error(503, "primary down")
    fake.server.queue_error(500, "backup down too")

    with pytest.raises(ModelError) as caught:
        await complete(fake.provider_for(maxRetries=0, fallbacks=[{"model": "m-backup"}]))

    message = str(caught.value)
    assert message.startswith("all 2 models failed")
    assert "m-primary" in message and "primary down" in message
    assert "m-backup" in message and "backup down too" in message
    assert caught.value.code == "E_MODEL_UNAVAILABLE"


async def test_auth_error_does_not_fall_back(fake: Fake) -> None:
    fake.server.queue_error(401, "bad key")

    with pytest.raises(ModelError) as caught:
        await complete(fake.provider_for(maxRetries=2, fallbacks=["m-backup"]))

    assert caught.value.code == "E_MODEL_AUTH"
    assert [r["model"] for r in fake.server.requests] == ["m-primary"]
