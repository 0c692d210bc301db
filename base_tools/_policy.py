"""Operator settings of the @goondan/base tools: every name and default, read from the environment.

Security policy never comes from a tool call's arguments (the LLM writes those), only from the
environment of the agent process, which the operator controls (systemd unit, shell, `.env`).
The settings are read at each call, so a change applies to the next call. A malformed value is
an error naming the variable (the tools fail closed), never a silent default.

- GOONDAN_FS_ALLOW_OUTSIDE_WORKDIR (off): `1` lets file-system and bash paths point anywhere
- GOONDAN_FS_ALLOW_PATHS (none): comma-separated absolute directories allowed besides the workdir
- GOONDAN_BASH_ENV_ALLOW (none): comma-separated variable names bash inherits beyond the safe set
- GOONDAN_BASH_OUTPUT_LIMIT_BYTES (65536): bytes kept of stdout and of stderr (half head, half tail)
- GOONDAN_HTTP_ALLOW_HOSTS (none): host, host:port, *.domain, IP or CIDR the address guard lets by
- GOONDAN_HTTP_ALLOW_PRIVATE (off): `1` switches the address guard off (any IP, loopback too)
- GOONDAN_HTTP_MAX_REDIRECTS (5): redirects followed per request
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from goondan import ErrorCode, ToolError

FS_ALLOW_OUTSIDE_WORKDIR = "GOONDAN_FS_ALLOW_OUTSIDE_WORKDIR"
FS_ALLOW_PATHS = "GOONDAN_FS_ALLOW_PATHS"
BASH_ENV_ALLOW = "GOONDAN_BASH_ENV_ALLOW"
BASH_OUTPUT_LIMIT = "GOONDAN_BASH_OUTPUT_LIMIT_BYTES"
HTTP_ALLOW_HOSTS = "GOONDAN_HTTP_ALLOW_HOSTS"
HTTP_ALLOW_PRIVATE = "GOONDAN_HTTP_ALLOW_PRIVATE"
HTTP_MAX_REDIRECTS = "GOONDAN_HTTP_MAX_REDIRECTS"
TOOL_SANDBOX = "GOONDAN_TOOL_SANDBOX"

DEFAULT_BASH_OUTPUT_LIMIT = 65536
DEFAULT_HTTP_MAX_REDIRECTS = 5

# What bash always inherits: enough for programs to find themselves, a locale and a temp dir;
# never the secrets of the swarm (API keys and tokens live in the agent process's environment).
BASH_SAFE_ENV = ("PATH", "HOME", "LANG", "TERM", "TZ", "USER", "SHELL", "TMPDIR")
BASH_SAFE_ENV_PREFIXES = ("LC_",)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class PolicyError(ToolError):
    code = ErrorCode.E_TOOL_POLICY


def _setting_error(name: str, value: str, expected: str) -> PolicyError:
    return PolicyError(
        f"setting {name}={value!r} is invalid: expected {expected}",
        suggestion=f"the operator must fix {name} in the agent's environment "
        "(see base_tools/README.md)",
    )


def _flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise _setting_error(name, raw, "1/true/yes/on or 0/false/no/off")


def tool_sandbox_enabled() -> bool:
    """On unless the operator sets GOONDAN_TOOL_SANDBOX=off (see base_tools/README.md)."""
    if os.environ.get(TOOL_SANDBOX, "").strip() == "":
        return True
    return _flag(TOOL_SANDBOX)


def _items(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise _setting_error(name, raw, "a positive integer")
    return int(raw)


# --- file-system and bash paths ---------------------------------------------------------------


@dataclass(frozen=True)
class FsPolicy:
    allow_outside: bool
    extra_roots: tuple[Path, ...]


def fs_policy() -> FsPolicy:
    roots = []
    for item in _items(FS_ALLOW_PATHS):
        if not os.path.isabs(item):
            raise _setting_error(FS_ALLOW_PATHS, item, "comma-separated absolute directories")
        roots.append(Path(os.path.realpath(item)))
    return FsPolicy(allow_outside=_flag(FS_ALLOW_OUTSIDE_WORKDIR), extra_roots=tuple(roots))


# --- bash ---------------------------------------------------------------------------------------


def bash_env_allow() -> frozenset[str]:
    return frozenset(_items(BASH_ENV_ALLOW))


def bash_output_limit() -> int:
    return _positive_int(BASH_OUTPUT_LIMIT, DEFAULT_BASH_OUTPUT_LIMIT)


# --- outgoing HTTP --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowRule:
    """One GOONDAN_HTTP_ALLOW_HOSTS entry: a host name (`*.` for subdomains) or an IP network,
    optionally with a port."""

    host: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    def matches(self, host: str, ip: IPAddress, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return ip.version == self.network.version and ip in self.network
        assert self.host is not None
        name = host.lower().rstrip(".")
        if self.host.startswith("*."):
            return name.endswith(self.host[1:])
        return name == self.host


@dataclass(frozen=True)
class HttpPolicy:
    allow_private: bool
    rules: tuple[AllowRule, ...]
    max_redirects: int

    def allows(self, host: str, ip: IPAddress, port: int) -> bool:
        return self.allow_private or any(rule.matches(host, ip, port) for rule in self.rules)


def http_policy() -> HttpPolicy:
    return HttpPolicy(
        allow_private=_flag(HTTP_ALLOW_PRIVATE),
        rules=tuple(_allow_rule(item) for item in _items(HTTP_ALLOW_HOSTS)),
        max_redirects=_positive_int(HTTP_MAX_REDIRECTS, DEFAULT_HTTP_MAX_REDIRECTS),
    )


def _allow_rule(entry: str) -> AllowRule:
    network = _network(entry)
    if network is not None:
        return AllowRule(network=network)
    host, port = entry, None
    head, sep, tail = entry.rpartition(":")
    if sep and tail.isdigit() and head:
        host, port = head, int(tail)
        if not 0 < port < 65536:
            raise _setting_error(HTTP_ALLOW_HOSTS, entry, "a port between 1 and 65535")
    network = _network(host.removeprefix("[").removesuffix("]"))
    if network is not None:
        return AllowRule(network=network, port=port)
    name = host.lower().rstrip(".")
    label = name.removeprefix("*.")
    if not label or any(ch in label for ch in "/:*[] ") or label.startswith("."):
        raise _setting_error(
            HTTP_ALLOW_HOSTS, entry, "host, host:port, *.domain, an IP address or a CIDR network"
        )
    return AllowRule(host=name, port=port)


def _network(text: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
