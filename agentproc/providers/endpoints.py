"""Which base URL a Model talks to, and why.

`Model.spec.endpoint` wins. Without it, the provider SDK's own base-URL variable
(`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`,
`GOOGLE_GEMINI_BASE_URL`) is honoured, so a gateway or proxy works without
editing the bundle; otherwise the provider's public API. `goondan doctor` and the agent's
start-up log report the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

BASE_URL_ENV = {
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "google": "GOOGLE_GEMINI_BASE_URL",
}
PUBLIC_API = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "google": "https://generativelanguage.googleapis.com",
}


class Endpoint(NamedTuple):
    url: str | None  # None: the provider has no network endpoint (scripted)
    source: str  # "Model.spec.endpoint", "$OPENAI_BASE_URL", or "default"


def effective_endpoint(provider: str, endpoint: str | None, environ: Mapping[str, str]) -> Endpoint:
    if endpoint:
        return Endpoint(endpoint, "Model.spec.endpoint")
    variable = BASE_URL_ENV.get(provider)
    if variable and environ.get(variable):
        return Endpoint(environ[variable], f"${variable}")
    return Endpoint(PUBLIC_API.get(provider), "default")
