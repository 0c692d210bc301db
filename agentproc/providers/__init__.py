"""Model providers behind one small interface; `make_provider` is the one place that picks one.

Each provider module is imported only when a Model uses it, so an agent on the scripted model
never pays for the `openai` SDK import.
"""

from __future__ import annotations

from typing import Protocol

from agentproc.messages import ModelReply, ModelRequest
from goondan.bundle.model import ModelSpec


class Provider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelReply: ...

    async def aclose(self) -> None: ...


PROVIDERS = ("scripted", "openai")


def make_provider(spec: ModelSpec, api_key: str | None) -> Provider:
    """Build the provider for a Model resource. Raises `ValueError` for an unknown provider."""
    if spec.provider == "scripted":
        from agentproc.providers.scripted import ScriptedProvider

        return ScriptedProvider(spec)
    if spec.provider == "openai":
        from agentproc.providers.openai import OpenAIProvider

        return OpenAIProvider(spec, api_key)
    raise ValueError(
        f"Model provider '{spec.provider}' is not supported (supported: {', '.join(PROVIDERS)})"
    )
