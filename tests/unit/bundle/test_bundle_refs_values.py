"""ObjectRef parsing and ValueSource resolution: the pieces the runtime reuses."""

from __future__ import annotations

import pytest

from goondan.bundle import ObjectRef, SecretRef, ValueSource, parse_ref, resolve_value
from goondan.bundle.values import secret_env_candidates, upper_snake


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Tool/bash", ObjectRef(kind="Tool", name="bash")),
        ({"kind": "Model", "name": "claude"}, ObjectRef(kind="Model", name="claude")),
        (
            {
                "kind": "Tool",
                "name": "agents",
                "package": "@goondan/base",
                "apiVersion": "goondan.ai/v1",
            },
            ObjectRef(kind="Tool", name="agents", package="@goondan/base"),
        ),
        (ObjectRef(kind="Agent", name="a"), ObjectRef(kind="Agent", name="a")),
    ],
)
def test_parse_ref_accepts_both_forms(raw: object, expected: ObjectRef) -> None:
    assert parse_ref(raw) == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("Tool", "exactly one '/'"),
        ("Tool/a/b", "exactly one '/'"),
        ("/bash", "exactly one '/'"),
        ("Tool/", "exactly one '/'"),
        ("Tool/my tool", "must not contain spaces"),
        ({"kind": "Tool"}, "missing name"),
        ({"kind": "Tool", "name": ""}, "'name' must be a non-empty string"),
        ({"kind": "Tool", "name": "x", "scope": "y"}, "unknown field(s) scope"),
        ({"kind": "Tool", "name": "x", "apiVersion": "v2"}, "not supported"),
        (42, "got a number"),
        (None, "got nothing"),
    ],
)
def test_parse_ref_rejects_malformed_refs(raw: object, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_ref(raw)
    assert fragment in str(info.value)


def test_resolve_literal_and_env() -> None:
    assert resolve_value(ValueSource(value="x"), {}) == "x"
    assert resolve_value(ValueSource(env="KEY"), {"KEY": "k"}) == "k"
    assert resolve_value(ValueSource(env="KEY"), {"KEY": ""}) == ""  # set but empty stays empty
    assert resolve_value(ValueSource(env="KEY"), {}) is None  # never a silent empty string


def test_secret_candidates_in_upstream_order() -> None:
    secret = SecretRef(ref="Secret/slack-oauth", key="clientSecret")
    assert secret_env_candidates(secret) == [
        "GOONDAN_SECRET_SLACK_OAUTH_CLIENT_SECRET",
        "GOONDAN_SECRET_SLACK_OAUTH",
        "SECRET_SLACK_OAUTH_CLIENT_SECRET",
        "SECRET_SLACK_OAUTH",
    ]
    source = ValueSource(secret_ref=secret)
    env = {"SECRET_SLACK_OAUTH": "least", "SECRET_SLACK_OAUTH_CLIENT_SECRET": "third"}
    assert resolve_value(source, env) == "third"
    env["GOONDAN_SECRET_SLACK_OAUTH"] = "second"
    assert resolve_value(source, env) == "second"
    env["GOONDAN_SECRET_SLACK_OAUTH_CLIENT_SECRET"] = "first"
    assert resolve_value(source, env) == "first"
    assert resolve_value(source, {}) is None


def test_upper_snake() -> None:
    assert upper_snake("slack-oauth") == "SLACK_OAUTH"
    assert upper_snake("client_secret") == "CLIENT_SECRET"
    assert upper_snake("botToken") == "BOT_TOKEN"
