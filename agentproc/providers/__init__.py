"""Model providers behind one small interface; `make_provider` is the one place that picks one.

Each provider module is imported only when a Model uses it, so an agent on the scripted model
never pays for the `openai` or `anthropic` SDK import.

What `make_provider` returns for `openai`, `anthropic` and `google` is a `ResilientProvider`
(`resilience.py`): the Model's adapter plus its `options.fallbacks`, with retries, backoff,
`retry-after`, first-token and whole-call timeouts. The turn loop calls `complete()` and gets a
`ModelReply` or, once all that is used up, a `ModelError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

import msgspec

from agentproc.messages import ModelError, ModelReply, ModelRequest
from agentproc.providers._common import ENDPOINT_FIELD, Backend, TextCallback
from agentproc.providers.endpoints import effective_endpoint
from agentproc.providers.resilience import ResilientProvider, RetryPolicy, parse_fallbacks
from goondan.bundle.model import ModelCapabilities, ModelSpec
from ipc.error_codes import ErrorCode


class Provider(Protocol):
    async def complete(
        self, request: ModelRequest, *, on_text: TextCallback | None = None
    ) -> ModelReply:
        """One model reply. With `capabilities.streaming: true`, `on_text` receives the reply's
        text piece by piece as it arrives (never called for a non-streaming model)."""
        ...

    async def aclose(self) -> None: ...


PROVIDERS = ("scripted", "openai", "anthropic", "google")
_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google": "GEMINI_API_KEY",
}


def make_provider(spec: ModelSpec, api_key: str | None, more_keys: Sequence[str] = ()) -> Provider:
    """Build the provider for a Model resource. Raises `ValueError` for an unknown provider and
    `ModelError` (code `E_MODEL_CONFIG` / `E_MODEL_AUTH`) for unusable options or keys.

    `more_keys` (from `apiKeys`) are rotated with `api_key` on 429 / 401 (`providers.keys`)
    before any fallback model is tried."""
    if spec.provider == "scripted" and "fallbacks" not in spec.options:
        # Deterministic and offline: nothing to retry, nothing to fall back from.
        from agentproc.providers.scripted import ScriptedProvider

        return ScriptedProvider(spec)
    policy = RetryPolicy.from_options(spec.options)
    fallbacks = parse_fallbacks(spec.options)
    backend = _backend(spec, api_key, policy)
    if more_keys and api_key:
        from agentproc.providers.keys import KeyRotation

        backends = [backend, *(_backend(spec, key, policy) for key in more_keys)]
        backend = KeyRotation(backends, spec.options)
    chain: list[tuple[Backend, RetryPolicy]] = [(backend, policy)]
    for index, fallback in enumerate(fallbacks):
        where = f"Model.spec.options.fallbacks[{index}]"
        provider = fallback.provider or spec.provider
        same = provider == spec.provider
        endpoint = fallback.endpoint or (spec.endpoint if same else None)
        if fallback.api_key_env:
            key = os.environ.get(fallback.api_key_env)
            if not key:
                raise ModelError(
                    f"{where}.apiKeyEnv: the environment variable {fallback.api_key_env} "
                    "is not set; export it, or remove the fallback",
                    code=ErrorCode.E_MODEL_AUTH,
                )
        else:
            key = api_key if same and endpoint == spec.endpoint else None
        fallback_spec = ModelSpec(
            provider=provider,
            model=fallback.model,
            endpoint=endpoint,
            options=fallback.options,
            capabilities=ModelCapabilities(
                streaming=(
                    spec.capabilities.streaming
                    if fallback.streaming is None
                    else fallback.streaming
                ),
                tool_calling=spec.capabilities.tool_calling,
            ),
        )
        fallback_policy = RetryPolicy.from_options(fallback.options, base=policy)
        try:
            field = f"{where}.endpoint" if fallback.endpoint else ENDPOINT_FIELD
            backend = _backend(fallback_spec, key, fallback_policy, field)
        except ModelError as exc:
            if exc.code == ErrorCode.E_MODEL_AUTH and key is None:
                variable = _KEY_ENV.get(provider, "the variable holding the key")
                raise ModelError(
                    f"{where}: the {provider} provider needs an API key for "
                    f"{fallback.endpoint or 'its public API'}; set apiKeyEnv to the environment "
                    f"variable that holds it (e.g. apiKeyEnv: {variable})",
                    code=ErrorCode.E_MODEL_AUTH,
                ) from None
            raise ModelError(f"{where}: {exc}", code=exc.code) from None
        except ValueError as exc:
            raise ModelError(f"{where}: {exc}", code=ErrorCode.E_MODEL_CONFIG) from None
        chain.append((backend, fallback_policy))
    return ResilientProvider(chain)


def _backend(
    spec: ModelSpec, api_key: str | None, policy: RetryPolicy, endpoint_field: str = ENDPOINT_FIELD
) -> Backend:
    """`endpoint_field`: the bundle's field that sets `spec.endpoint` (a fallback's own)."""
    endpoint = effective_endpoint(spec.provider, spec.endpoint, os.environ)
    if endpoint.source != "default":
        spec = msgspec.structs.replace(spec, endpoint=endpoint.url)
    if endpoint.source.startswith("$"):  # the errors' hints name the variable that set it
        endpoint_field = endpoint.source
    if spec.provider == "openai":
        from agentproc.providers.openai import OpenAIProvider

        return OpenAIProvider(spec, api_key, policy, endpoint_field=endpoint_field)
    if spec.provider == "anthropic":
        from agentproc.providers.anthropic import AnthropicProvider

        return AnthropicProvider(spec, api_key, policy, endpoint_field=endpoint_field)
    if spec.provider == "google":
        from agentproc.providers.google import GoogleProvider

        return GoogleProvider(spec, api_key, policy, endpoint_field=endpoint_field)
    if spec.provider == "scripted":
        from agentproc.providers.scripted import ScriptedProvider

        return ScriptedProvider(spec)
    raise ValueError(
        f"Model provider '{spec.provider}' is not supported (supported: {', '.join(PROVIDERS)})"
    )
