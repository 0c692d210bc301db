"""The address guard of http-fetch (SSRF): refused by default, allowed when configured.

Loopback cases go through the http-fetch handler against real servers on 127.0.0.1 and ::1.
Addresses that are not on this machine (10/8, metadata, ...) must never be dialled from a test,
so those go through the same guarded client with a recording network backend in place of the
socket layer: it proves which IP the guard would connect to, and that refused ones are not.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore
import httpx
import pytest

from base_tools._http import guarded_client
from base_tools._netguard import refusal
from base_tools._policy import http_policy
from base_tools.http_fetch import handlers
from goondan import ToolContext, ToolError
from tests.unit.base_tools.local_http import LocalServer

get = handlers["get"]


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """Stands in for the socket layer: remembers each connect, opens nothing."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append((host, port))
        raise httpcore.ConnectError("recording backend: not connecting")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AssertionError("unexpected unix socket")

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("unexpected sleep")


async def attempt(url: str) -> tuple[list[tuple[str, int]], BaseException]:
    """GET `url` through the guard with the recording backend; what it dialled, how it ended."""
    backend = RecordingBackend()
    async with guarded_client(5.0, inner=backend) as client:
        with pytest.raises((ToolError, httpx.ConnectError)) as info:
            await client.get(url)
    return backend.connects, info.value


# Not on this machine: only ever handed to the recording backend.
REMOTE = [
    ("http://10.0.0.1/", "10.0.0.1", "private"),
    ("http://172.16.5.4:8080/", "172.16.5.4", "private"),
    ("http://192.168.1.1/", "192.168.1.1", "private"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "cloud metadata"),
    ("http://100.100.100.200/", "100.100.100.200", "cloud metadata"),
    ("http://100.64.0.1/", "100.64.0.1", None),
    ("http://[fd00:ec2::254]/", "fd00:ec2::254", "cloud metadata"),
    ("http://[fc00::1]/", "fc00::1", "private"),
    ("http://[fe80::1]/", "fe80::1", "link-local"),
    ("http://[::ffff:10.0.0.1]/", "::ffff:10.0.0.1", "private"),
    ("http://[64:ff9b::a9fe:a9fe]/", "64:ff9b::a9fe:a9fe", "cloud metadata"),
    ("http://224.0.0.1/", "224.0.0.1", "multicast"),
    ("http://127.0.0.1:9/", "127.0.0.1", "loopback"),
    ("http://2130706433:9/", "127.0.0.1", "loopback"),  # decimal spelling of 127.0.0.1
    ("http://127.1:9/", "127.0.0.1", "loopback"),
    ("http://0.0.0.0:9/", "0.0.0.0", "unspecified"),
    ("http://[::]:9/", "::", "unspecified"),
    ("http://[::ffff:127.0.0.1]:9/", "::ffff:127.0.0.1", "loopback"),
]


@pytest.mark.parametrize("url, ip, reason", REMOTE)
async def test_internal_addresses_are_refused_before_connecting(
    url: str, ip: str, reason: str | None
) -> None:
    connects, error = await attempt(url)
    assert connects == []
    assert isinstance(error, ToolError) and error.code == "E_HTTP_BLOCKED"
    assert f"{ipaddress.ip_address(ip)} is a {reason or 'non-public'} address" in str(error)
    assert "GOONDAN_HTTP_ALLOW_HOSTS" in str(error)


@pytest.mark.parametrize("url, ip, reason", REMOTE)
async def test_internal_addresses_are_allowed_when_configured(
    url: str, ip: str, reason: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    network = ipaddress.ip_network(ip)
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", f"example.org,{network}")
    connects, error = await attempt(url)
    port = httpx.URL(url).port or 80
    assert connects == [(str(ipaddress.ip_address(ip)), port)]
    assert isinstance(error, httpx.ConnectError)


async def test_allow_private_switches_the_guard_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_PRIVATE", "1")
    connects, _ = await attempt("http://10.1.2.3:81/")
    assert connects == [("10.1.2.3", 81)]


async def test_a_hostname_is_dialled_by_the_checked_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The IP that passed the check is the one connected to: no second DNS lookup to rebind."""
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", "localhost")
    connects, _ = await attempt("http://localhost:81/")
    assert connects and all(ipaddress.ip_address(host).is_loopback for host, _ in connects)


@pytest.mark.parametrize(
    "rule, allowed",
    [
        ("127.0.0.1:81", True),
        ("127.0.0.1:82", False),
        ("127.0.0.0/8", True),
        ("localhost", False),  # a host-name rule matches the URL's host, not the resolved IP
        ("*.example.com", False),
        ("::1", False),
    ],
)
async def test_allow_rules(rule: str, allowed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", rule)
    connects, _ = await attempt("http://127.0.0.1:81/")
    assert bool(connects) is allowed


@pytest.mark.parametrize(
    "host, port, allowed",
    [
        ("api.internal.example", 443, True),
        ("API.Internal.Example.", 80, True),
        ("internal.example", 443, False),
        ("evilinternal.example", 443, False),
        ("db.internal.example", 5432, True),
        ("other.example", 443, False),
    ],
)
def test_host_rules(host: str, port: int, allowed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", " *.internal.example , other.example:8443")
    assert http_policy().allows(host, ipaddress.ip_address("10.0.0.1"), port) is allowed


@pytest.mark.parametrize("value", ["10.0.0.0/33", "host:99999", "bad host", "*."])
async def test_malformed_allow_list_fails_closed(
    ctx: ToolContext, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", value)
    with pytest.raises(ToolError) as info:
        await get(ctx, {"url": "http://127.0.0.1:9/"})
    assert info.value.code == "E_TOOL_POLICY" and "GOONDAN_HTTP_ALLOW_HOSTS" in str(info.value)


def test_public_addresses_pass() -> None:
    for ip in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808"):
        assert refusal(ipaddress.ip_address(ip)) is None


# --- end to end through the handler, on this machine's loopback --------------------------------


@pytest.fixture
async def servers() -> AsyncIterator[tuple[LocalServer, LocalServer, LocalServer]]:
    async with LocalServer() as first, LocalServer() as second, LocalServer("::1") as six:
        yield first, second, six


def _cases(first: LocalServer, second: LocalServer, six: LocalServer) -> dict[str, tuple[Any, ...]]:
    """name -> (url, the server that must not be reached by default, allow-list when allowed,
    the allow-list in force by default)."""
    return {
        "127.0.0.1": (f"{first.url}/hello", first, "127.0.0.1", ""),
        "[::1]": (f"{six.url}/hello", six, "::1", ""),
        "localhost": (f"http://localhost:{first.port}/hello", first, "localhost", ""),
        "redirect to loopback": (
            f"{first.url}/redirect?to={second.url}/hello",
            second,
            f"127.0.0.1:{first.port},127.0.0.1:{second.port}",
            f"127.0.0.1:{first.port}",
        ),
        "redirect to localhost": (
            f"{first.url}/redirect?to=http://localhost:{second.port}/hello",
            second,
            f"127.0.0.1:{first.port},localhost",
            f"127.0.0.1:{first.port}",
        ),
    }


CASES = ["127.0.0.1", "[::1]", "localhost", "redirect to loopback", "redirect to localhost"]


@pytest.mark.parametrize("case", CASES)
async def test_loopback_refused_by_default(
    ctx: ToolContext, servers: tuple[Any, ...], case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, guarded, _, default = _cases(*servers)[case]
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", default)
    with pytest.raises(ToolError) as info:
        await get(ctx, {"url": url})
    assert info.value.code == "E_HTTP_BLOCKED"
    assert "loopback address" in str(info.value)
    assert guarded.hits == []
    if case.startswith("redirect"):
        assert servers[0].hits == ["/redirect"]  # the allowed server was asked, then refused


@pytest.mark.parametrize("case", CASES)
async def test_loopback_allowed_when_configured(
    ctx: ToolContext, servers: tuple[Any, ...], case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, target, allowed, _ = _cases(*servers)[case]
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", allowed)
    out = await get(ctx, {"url": url})
    assert (out["status"], out["body"]) == (200, "hello")
    assert target.hits[-1] == "/hello"
