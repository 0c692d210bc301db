"""The environment variables a bundle's resources read (`valueFrom: {env}`, a secret's
candidate names, a fallback's `apiKeyEnv`): what `goondan doctor` checks, and what a Ray-placed
agent is given from the orchestrator's environment. Names only; values are never read here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from goondan.bundle.bundle import Bundle
from goondan.bundle.model import ValueSource
from goondan.bundle.values import secret_env_candidates


@dataclass(frozen=True)
class EnvNeed:
    names: tuple[str, ...]  # any one of them will do (a secret's candidates)
    where: str  # "Model/llm spec.apiKey"
    required: bool  # unset: the process fails to start (else: a warning)


def env_needs(bundle: Bundle) -> list[EnvNeed]:
    """Every environment variable the bundle's resources read, in bundle order."""
    needs: list[EnvNeed] = []
    for model in bundle.of_kind("Model"):
        if model.spec.api_key is not None:
            needs.extend(_from_source(model.spec.api_key, f"{model.label} spec.apiKey", True))
        for index, source in enumerate(model.spec.api_keys):
            where = f"{model.label} spec.apiKeys[{index}]"
            needs.extend(_from_source(source, where, True))
        fallbacks = model.spec.options.get("fallbacks")
        for index, item in enumerate(fallbacks if isinstance(fallbacks, list) else ()):
            if isinstance(item, dict) and isinstance(item.get("apiKeyEnv"), str):
                where = f"{model.label} spec.options.fallbacks[{index}].apiKeyEnv"
                needs.append(EnvNeed((item["apiKeyEnv"],), where, True))
    for connection in bundle.of_kind("Connection"):
        for field in ("config", "secrets"):
            for key, source in getattr(connection.spec, field).items():
                where = f"{connection.label} spec.{field}.{key}"
                needs.extend(_from_source(source, where, True))
    for tool in bundle.of_kind("Tool"):
        mcp = tool.spec.mcp
        for field, sources in (("env", mcp.env), ("headers", mcp.headers)) if mcp else ():
            for key, source in sources.items():
                needs.extend(_from_source(source, f"{tool.label} spec.mcp.{field}.{key}", True))
    for kind in ("Extension", "Tool"):
        for resource in bundle.of_kind(kind):
            config = getattr(resource.spec, "config", None)
            for path, name in _env_refs(config, "spec.config"):
                needs.append(EnvNeed((name,), f"{resource.label} {path}", False))
    return needs


def _from_source(source: ValueSource, where: str, required: bool) -> Iterator[EnvNeed]:
    if source.env is not None:
        yield EnvNeed((source.env,), where, required)
    elif source.secret_ref is not None:
        yield EnvNeed(tuple(secret_env_candidates(source.secret_ref)), where, required)


def _env_refs(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """`{valueFrom: {env: NAME}}` anywhere in free-form config (an Extension's)."""
    if isinstance(value, dict):
        source = value.get("valueFrom")
        if isinstance(source, dict) and isinstance(source.get("env"), str):
            yield path, source["env"]
            return
        for key, item in value.items():
            yield from _env_refs(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _env_refs(item, f"{path}[{index}]")
