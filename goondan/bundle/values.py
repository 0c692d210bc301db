"""Resolve a `ValueSource` (literal, environment variable or secret reference) to its text.

Loading never reads the environment: an unset variable is the caller's concern (a Model's
`apiKey` is checked when the model is first called, a Connection's values when its connector
starts), so `goondan validate` gives the same answer on every machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from goondan.bundle.model import SecretRef, ValueSource

_NON_ALNUM = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def upper_snake(token: str) -> str:
    """`slack-oauth` -> `SLACK_OAUTH`, `clientSecret` -> `CLIENT_SECRET`."""
    spaced = _CAMEL.sub(r"\1_\2", token)
    return _NON_ALNUM.sub("_", spaced).strip("_").upper()


def secret_name(secret: SecretRef) -> str:
    """The `<name>` of `Secret/<name>` (the validator guarantees the form)."""
    return secret.ref.split("/", 1)[1] if "/" in secret.ref else secret.ref


def secret_env_candidates(secret: SecretRef) -> list[str]:
    """Environment variables tried for a secret, most specific first (upstream order)."""
    name = upper_snake(secret_name(secret))
    key = upper_snake(secret.key)
    return [
        f"GOONDAN_SECRET_{name}_{key}",
        f"GOONDAN_SECRET_{name}",
        f"SECRET_{name}_{key}",
        f"SECRET_{name}",
    ]


def resolve_value(source: ValueSource, env: Mapping[str, str]) -> str | None:
    """The value's text, or None when the variable (or every secret candidate) is unset.

    An empty variable counts as set: we never substitute anything for a missing value, and
    never turn a missing value into an empty string either.
    """
    if source.value is not None:
        return source.value
    if source.env is not None:
        return env.get(source.env)
    if source.secret_ref is not None:
        for name in secret_env_candidates(source.secret_ref):
            if name in env:
                return env[name]
    return None


def describe_source(source: ValueSource) -> str:
    """Where a value comes from, for "missing value" messages (never the value itself)."""
    if source.env is not None:
        return f"environment variable {source.env}"
    if source.secret_ref is not None:
        names = " / ".join(secret_env_candidates(source.secret_ref))
        return f"secret {source.secret_ref.ref} key {source.secret_ref.key} (env {names})"
    return "a literal value"
