"""Semantic versions and npm-style ranges, as upstream Goondan (node-semver) reads them.

A range is `||`-separated alternatives; each is a space-separated set of comparators that must
all hold. Supported: exact versions, `=`, `<`, `<=`, `>`, `>=`, x-ranges (`1.x`, `1.2.*`, `*`,
partial versions such as `1.2`), tilde (`~1.2.3`), caret (`^1.2.3`) and hyphen ranges
(`1.2.3 - 2.3.4`). As in node-semver, a pre-release version satisfies a range only when one of
its comparators names a pre-release of the same major.minor.patch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering


class SemverError(ValueError):
    """A version or range that does not parse; the message says which and why."""


_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?\s*$")
# Python distributions may carry PEP 440 pre-releases (1.0.0a1, 1.0.0rc2): map them to semver.
_PEP440 = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-.]?(a|b|rc|dev)\.?(\d+))?\s*$")
_PARTIAL = re.compile(
    r"^v?(?P<major>\d+|[xX*])(?:\.(?P<minor>\d+|[xX*])(?:\.(?P<patch>\d+|[xX*])"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?)?)?$"
)
_COMPARATOR = re.compile(r"^(<=|>=|<|>|=|\^|~>?)?\s*(.*)$")


@total_ordering
@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Version:
        """A semver version; PEP 440 `1.2`, `1.0.0rc1` are accepted as `1.2.0`, `1.0.0-rc.1`."""
        m = _VERSION.match(text)
        if m:
            pre = tuple(_identifier(p) for p in m.group(4).split(".")) if m.group(4) else ()
            return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre)
        m = _PEP440.match(text)
        if m:
            pre = (m.group(4), int(m.group(5))) if m.group(4) else ()
            return cls(int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0), pre)
        raise SemverError(f"'{text}' is not a version (expected MAJOR.MINOR.PATCH, e.g. 1.2.0)")

    @property
    def core(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        if self.core != other.core:
            return self.core < other.core
        return _pre_key(self.prerelease) < _pre_key(other.prerelease)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        return f"{text}-{'.'.join(map(str, self.prerelease))}" if self.prerelease else text


def _identifier(part: str) -> int | str:
    return int(part) if part.isdigit() else part


def _pre_key(pre: tuple[int | str, ...]) -> tuple[tuple[int, int | str], ...]:
    """Sort key: no pre-release sorts after any; numeric identifiers before alphanumeric ones."""
    if not pre:
        return ((2, 0),)
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in pre)


@dataclass(frozen=True)
class Comparator:
    op: str  # one of < <= > >= =
    version: Version

    def test(self, v: Version) -> bool:
        if self.op == "=":
            return v == self.version
        if self.op == "<":
            return v < self.version
        if self.op == "<=":
            return v <= self.version
        if self.op == ">":
            return v > self.version
        return v >= self.version

    def __str__(self) -> str:
        return f"{'' if self.op == '=' else self.op}{self.version}"


@dataclass(frozen=True)
class Range:
    """A parsed range: alternatives (`||`) of comparator sets; an empty set matches anything."""

    text: str
    alternatives: tuple[tuple[Comparator, ...], ...]

    @classmethod
    def parse(cls, text: str) -> Range:
        alternatives = tuple(_parse_set(part.strip(), text) for part in text.split("||"))
        return cls(text=text, alternatives=alternatives)

    def satisfied_by(self, version: Version) -> bool:
        return any(_set_allows(comparators, version) for comparators in self.alternatives)

    def pep440(self) -> str | None:
        """The same constraint as a pip specifier (`>=1.2.0,<2.0.0`), or None when pip cannot
        say it (`||`); the range is then checked after installing."""
        if len(self.alternatives) != 1:
            return None
        parts = [f"=={c.version}" if c.op == "=" else str(c) for c in self.alternatives[0]]
        return ",".join(parts)

    def __str__(self) -> str:
        return self.text


def satisfies(version: str, range_text: str) -> bool:
    return Range.parse(range_text).satisfied_by(Version.parse(version))


def _set_allows(comparators: tuple[Comparator, ...], version: Version) -> bool:
    if not all(c.test(version) for c in comparators):
        return False
    if not version.prerelease:
        return True
    # `^1.2.0` must not pull in 1.3.0-beta: only a range naming a pre-release of this very
    # version admits pre-releases.
    return any(c.version.prerelease and c.version.core == version.core for c in comparators)


def _parse_set(text: str, whole: str) -> tuple[Comparator, ...]:
    if not text:
        return ()
    hyphen = re.fullmatch(r"(\S+)\s+-\s+(\S+)", text)
    if hyphen:
        low = _partial(hyphen.group(1), whole)
        high = _partial(hyphen.group(2), whole)
        return (*_expand(">=", low), *_expand("<=", high))
    # `>= 1.2.3` is one comparator: join an operator to the version after it.
    tokens = re.sub(r"(<=|>=|<|>|=|\^|~>?)\s+", r"\1", text).split()
    found: list[Comparator] = []
    for token in tokens:
        m = _COMPARATOR.match(token)
        assert m is not None  # the pattern matches any string
        op, rest = m.group(1) or "", m.group(2)
        found.extend(_expand(op, _partial(rest, whole)))
    return tuple(found)


@dataclass(frozen=True)
class _Partial:
    """A version with possibly missing (x) parts: `1`, `1.2`, `1.2.x`."""

    major: int | None
    minor: int | None
    patch: int | None
    pre: tuple[int | str, ...]

    def floor(self) -> Version:
        return Version(self.major or 0, self.minor or 0, self.patch or 0, self.pre)


def _partial(text: str, whole: str) -> _Partial:
    m = _PARTIAL.match(text)
    if not m:
        raise SemverError(f"'{whole}' is not a valid version range: cannot read '{text}'")

    def num(name: str) -> int | None:
        value = m.group(name)
        return None if value is None or value in "xX*" else int(value)

    major, minor, patch = num("major"), num("minor"), num("patch")
    if major is None:
        minor = patch = None
    elif minor is None:
        patch = None
    pre = tuple(_identifier(p) for p in m.group("pre").split(".")) if m.group("pre") else ()
    return _Partial(major, minor, patch, pre)


def _zero(major: int, minor: int = 0, patch: int = 0) -> Version:
    # node-semver's upper bounds are `<2.0.0-0`: below every 2.0.0 pre-release. The pre-release
    # rule in `_set_allows` already keeps those out, so a plain 2.0.0 bound is equivalent.
    return Version(major, minor, patch)


def _expand(op: str, p: _Partial) -> list[Comparator]:
    """One operator and a partial version -> plain comparators (node-semver's desugaring)."""
    if op in ("^",):
        return _caret(p)
    if op in ("~", "~>"):
        return _tilde(p)
    if p.major is None:  # `*`, `x`, `>=*`
        return [] if op in ("", "=", ">=", "<=") else [Comparator("<", _zero(0))]
    if p.minor is None or p.patch is None:
        return _x_range(op, p)
    v = p.floor()
    return [Comparator(op or "=", v)]


def _x_range(op: str, p: _Partial) -> list[Comparator]:
    assert p.major is not None
    low = p.floor()
    high = _zero(p.major + 1) if p.minor is None else _zero(p.major, p.minor + 1)
    if op in ("", "="):
        return [Comparator(">=", low), Comparator("<", high)]
    if op == ">":
        return [Comparator(">=", high)]
    if op == "<=":
        return [Comparator("<", high)]
    return [Comparator(op, low)]  # >=1.2 is >=1.2.0, <1.2 is <1.2.0


def _tilde(p: _Partial) -> list[Comparator]:
    if p.major is None:
        return []
    low = p.floor()
    high = _zero(p.major + 1) if p.minor is None else _zero(p.major, p.minor + 1)
    return [Comparator(">=", low), Comparator("<", high)]


def _caret(p: _Partial) -> list[Comparator]:
    if p.major is None:
        return []
    low = p.floor()
    if p.major > 0 or p.minor is None:
        high = _zero(p.major + 1)
    elif p.minor > 0 or p.patch is None:
        high = _zero(0, p.minor + 1)
    else:
        high = _zero(0, 0, p.patch + 1)
    return [Comparator(">=", low), Comparator("<", high)]
