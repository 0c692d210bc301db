"""Helpers for the model provider tests over real HTTP against the fake model APIs
(`test_openai_provider`, `test_anthropic_provider`, `test_model_retries`)."""

from __future__ import annotations

from typing import Any

from agentproc.messages import Message, ModelReply, ModelRequest, ToolDefinition
from agentproc.providers import Provider, make_provider
from goondan.bundle.model import ModelCapabilities, ModelSpec
from tests.fakes.fake_orchestrator import free_port

BASH = ToolDefinition(
    name="bash",
    description="Run a shell command",
    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}},
)


def make_test_provider(
    provider: str,
    model: str,
    endpoint: str | None,
    api_key: str | None,
    *,
    streaming: bool = False,
    **options: Any,
) -> Provider:
    """A `provider` for `model` at `endpoint`; `options` are Model.spec.options.

    maxRetries 0 unless a test is about retries: error tests must see one attempt, fast.
    """
    spec = ModelSpec(
        provider=provider,
        model=model,
        endpoint=endpoint,
        options={"maxRetries": 0, "retryBaseDelayMs": 1, **options},
        capabilities=ModelCapabilities(streaming=streaming),
    )
    return make_provider(spec, api_key)


async def complete(
    provider: Provider, request: ModelRequest | None = None, seen: list[str] | None = None
) -> ModelReply:
    """One completion of `request` (default: `ask()`), streamed text appended to `seen` when
    given; the provider is closed afterwards."""
    try:
        if seen is None:
            return await provider.complete(request or ask())
        return await provider.complete(request or ask(), on_text=seen.append)
    finally:
        await provider.aclose()


def ask(text: str = "hi", **params: Any) -> ModelRequest:
    """A one-message request from the user; `params` as Agent.spec.modelConfig.params."""
    return ModelRequest(
        messages=[Message(id="u1", role="user", content=text)], tools=[], params=params
    )


def closed_port() -> int:
    """A 127.0.0.1 port nobody listens on: connecting to it is refused."""
    return free_port()
