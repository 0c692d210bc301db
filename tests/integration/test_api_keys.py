"""Auth profiles: a Model with several API keys (`apiKey` + `apiKeys`) rotates them on 429 and
401, each key resting for its cooldown, before any fallback model is tried. Over real HTTP
against the fake OpenAI-compatible server, which accepts only the keys it is given."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentproc.messages import ModelError
from agentproc.providers import Provider, make_provider
from goondan.bundle.model import ModelSpec
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.provider_testkit import ask


def provider(endpoint: str, keys: list[str], **options: Any) -> Provider:
    spec = ModelSpec(
        provider="openai",
        model="gpt-test",
        endpoint=endpoint,
        options={"maxRetries": 0, "retryBaseDelayMs": 1, **options},
    )
    return make_provider(spec, keys[0], more_keys=keys[1:])


async def test_a_rejected_key_rotates_to_the_next_and_rests() -> None:
    async with FakeOpenAIServer(api_keys=["sk-good"]) as server:
        model = provider(server.base_url, ["sk-revoked", "sk-good"])
        try:
            first = await model.complete(ask("one"))
            second = await model.complete(ask("two"))
        finally:
            await model.aclose()

    assert (first.text, second.text) == ("echo: one", "echo: two")
    # The revoked key is tried once; the second call goes straight to the good one.
    assert server.authorizations == ["Bearer sk-revoked", "Bearer sk-good", "Bearer sk-good"]


async def test_a_rate_limited_key_rotates_and_comes_back_after_its_cooldown() -> None:
    async with FakeOpenAIServer(api_keys=["sk-a", "sk-b"]) as server:
        model = provider(server.base_url, ["sk-a", "sk-b"], keyCooldownSeconds=0.2)
        server.queue_error(429, "rate limited", headers={"retry-after": "0"})
        try:
            await model.complete(ask("one"))  # a: 429, then b
            server.queue_error(429, "b is rate limited too")
            with pytest.raises(ModelError) as caught:
                await model.complete(ask("two"))  # b (the last good one): 429; a is resting
            await asyncio.sleep(0.3)
            reply = await model.complete(ask("three"))
        finally:
            await model.aclose()

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_RATE_LIMITED", True)
    assert "its other 1 API keys are cooling down" in str(caught.value)
    assert reply.text == "echo: three"
    assert server.authorizations == [
        "Bearer sk-a",
        "Bearer sk-b",
        "Bearer sk-b",
        # Both rested past their cooldown: b stays first, as the key that last answered.
        "Bearer sk-b",
    ]


async def test_every_key_failing_names_them_and_keeps_the_code() -> None:
    async with FakeOpenAIServer(api_keys=["sk-other"]) as server:
        model = provider(server.base_url, ["sk-1", "sk-2", "sk-3"], maxRetries=3)
        try:
            with pytest.raises(ModelError) as caught:
                await model.complete(ask())
        finally:
            await model.aclose()

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_AUTH", False)
    assert "each of its 3 API keys" in str(caught.value)
    assert len(server.requests) == 3  # each key once; auth errors are never retried


async def test_keys_are_rotated_before_the_fallback_model() -> None:
    async with FakeOpenAIServer(api_keys=["sk-a", "sk-b"]) as server:
        server.queue_error(429, "a: slow down")
        model = provider(server.base_url, ["sk-a", "sk-b"], fallbacks=["gpt-fallback"])
        try:
            reply = await model.complete(ask("hi"))
        finally:
            await model.aclose()

    assert reply.text == "echo: hi"
    assert [body["model"] for body in server.requests] == ["gpt-test", "gpt-test"]
    assert server.authorizations == ["Bearer sk-a", "Bearer sk-b"]


async def test_other_errors_do_not_rotate() -> None:
    async with FakeOpenAIServer(api_keys=["sk-a", "sk-b"]) as server:
        server.queue_error(400, "bad request")
        model = provider(server.base_url, ["sk-a", "sk-b"])
        try:
            with pytest.raises(ModelError) as caught:
                await model.complete(ask())
        finally:
            await model.aclose()

    assert caught.value.code == "E_MODEL_BAD_REQUEST"
    assert server.authorizations == ["Bearer sk-a"]
