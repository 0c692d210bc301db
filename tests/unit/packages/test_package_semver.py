"""npm-style ranges, checked against node-semver's own examples (its range tests)."""

from __future__ import annotations

import pytest

from goondan.bundle.semver import Range, SemverError, Version, satisfies

SATISFIED = [
    ("1.0.0 - 2.0.0", "1.2.3"),
    ("1.2.3 - 2.3", "2.3.9"),
    ("1.2 - 2.3.4", "1.2.0"),
    ("^1.2.3", "1.8.1"),
    ("^0.1.2", "0.1.2"),
    ("^0.0.3", "0.0.3"),
    ("^1.2", "1.4.2"),
    ("^0.0.x", "0.0.9"),
    ("^0.x", "0.9.9"),
    ("^1.2.3-beta.2", "1.2.3-beta.4"),
    ("~1.2.3", "1.2.9"),
    ("~1.2", "1.2.0"),
    ("~1", "1.9.0"),
    ("~ 1.0", "1.0.2"),
    ("~>1.2", "1.2.7"),
    ("1.x", "1.9.0"),
    ("1.2.x", "1.2.3"),
    ("1.2.*", "1.2.99"),
    ("*", "1.2.3"),
    ("", "1.0.0"),
    ("x", "0.0.1"),
    ("1", "1.0.0"),
    ("1.2.3", "1.2.3"),
    ("=1.2.3", "1.2.3"),
    ("v1.2.3", "1.2.3"),
    (">=1.2.3", "1.2.3"),
    (">= 1.0.0", "1.0.0"),
    (">1.0.0", "1.0.1"),
    ("<2.0.0", "1.9999.9999"),
    ("<=2.0.0", "2.0.0"),
    (">1", "2.0.0"),
    ("<=1.2", "1.2.9"),
    (">=0.1.97 <0.2", "0.1.97"),
    ("1.2.3 || 2.x", "2.1.3"),
    ("1.2.x || 2.x", "1.2.3"),
    ("~1.2.1 >=1.2.3", "1.2.3"),
    ("<1 || >=2 <3", "2.5.0"),
    ("1.2.3-beta", "1.2.3-beta"),
]

UNSATISFIED = [
    ("1.0.0 - 2.0.0", "2.2.3"),
    ("1.2.3 - 2.3", "2.4.0"),
    ("^1.2.3", "2.0.0"),
    ("^1.2.3", "1.2.2"),
    ("^0.1.2", "0.2.0"),
    ("^0.0.3", "0.0.4"),
    ("^0.0.x", "0.1.0"),
    ("^1.2.3", "1.3.0-beta"),  # pre-releases only when the range names one of that version
    ("^1.2.3-beta.2", "1.2.4-beta.2"),
    ("~1.2.3", "1.3.0"),
    ("~1", "2.0.0"),
    ("1.x", "2.0.0"),
    ("1.2.x", "1.3.0"),
    ("1", "2.0.0-beta"),
    ("<2.0.0", "2.0.0-beta"),
    (">1", "1.9.9"),
    ("<=1.2", "1.3.0"),
    ("=1.2.3", "1.2.4"),
    (">=1.2.3 <1.3.0 || >=2.0.0 <2.1.0", "1.4.0"),
    ("1.2.3", "1.2.3-beta"),
    ("*", "1.0.0-rc.1"),
]


@pytest.mark.parametrize(("text", "version"), SATISFIED)
def test_satisfied(text: str, version: str) -> None:
    assert satisfies(version, text)


@pytest.mark.parametrize(("text", "version"), UNSATISFIED)
def test_not_satisfied(text: str, version: str) -> None:
    assert not satisfies(version, text)


def test_version_order_follows_semver_precedence() -> None:
    order = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
    ]
    parsed = [Version.parse(v) for v in order]
    assert parsed == sorted(reversed(parsed))


def test_python_versions_read_as_semver() -> None:
    assert Version.parse("1.2") == Version(1, 2, 0)
    assert Version.parse("2.0.0rc1") == Version(2, 0, 0, ("rc", 1))
    assert not satisfies("2.0.0rc1", "^1.0.0")


@pytest.mark.parametrize("text", ["^1.2.q", ">=", "1.2.3.4", "latest", "1.0.0 -"])
def test_bad_ranges_say_which(text: str) -> None:
    with pytest.raises(SemverError, match="not a valid version range"):
        Range.parse(text)


def test_pip_specifier() -> None:
    assert Range.parse("^1.2.3").pep440() == ">=1.2.3,<2.0.0"
    assert Range.parse("~0.3").pep440() == ">=0.3.0,<0.4.0"
    assert Range.parse("1.4.0").pep440() == "==1.4.0"
    assert Range.parse("*").pep440() == ""
    assert Range.parse("1.x || 3.x").pep440() is None
