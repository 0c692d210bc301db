"""The address guard of outgoing HTTP (SSRF defence), applied where the socket is opened.

`GuardedBackend` is an httpcore network backend: every TCP connection any request makes (the
first one, each redirect, each retry) passes through `connect_tcp`, which resolves the host
once, refuses the addresses the policy does not allow, and connects to an allowed *IP* — so a
second DNS answer (rebinding) cannot swap in another address after the check.

Refused unless allowed (GOONDAN_HTTP_ALLOW_HOSTS / GOONDAN_HTTP_ALLOW_PRIVATE): loopback,
private (RFC 1918, ULA), link-local, cloud metadata, multicast, unspecified, reserved and every
other non-global address, including IPv4 addresses hidden in IPv6 (::ffff:a.b.c.d, NAT64, 6to4).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

import anyio
import httpcore

from base_tools._policy import (
    HTTP_ALLOW_HOSTS,
    HTTP_ALLOW_PRIVATE,
    HttpPolicy,
    IPAddress,
)
from goondan import ErrorCode, ToolError

# Metadata services of the big clouds; most are link-local or private anyway, Azure's is not.
CLOUD_METADATA = frozenset(
    ipaddress.ip_address(ip)
    for ip in (
        "169.254.169.254",
        "169.254.170.2",
        "168.63.129.16",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class BlockedAddressError(ToolError):
    """The guard refused a connection; raised before any packet is sent to that address."""

    code = ErrorCode.E_HTTP_BLOCKED


def refusal(ip: IPAddress) -> str | None:
    """Why `ip` is not a public address (e.g. "loopback"), or None when it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return refusal(embedded)
    if ip in CLOUD_METADATA:
        return "cloud metadata"
    for kind, flag in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if flag:
            return kind
    return None if ip.is_global else "non-public"


class GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, policy: HttpPolicy, inner: httpcore.AsyncNetworkBackend | None = None):
        self._policy = policy
        self._inner = inner if inner is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await _resolve(host, port, timeout)
        allowed, refused = [], []
        for ip in addresses:
            reason = refusal(ip)
            if reason is None or self._policy.allows(host, ip, port):
                allowed.append(ip)
            else:
                refused.append((ip, reason))
        if not allowed:
            ip, reason = refused[0]
            shown = f"[{host}]" if ":" in host else host
            raise BlockedAddressError(
                f"refused to connect to {shown}:{port}: {ip} is a {reason} address. Only public "
                f"addresses are reachable unless the operator allows more with "
                f"{HTTP_ALLOW_HOSTS} (or {HTTP_ALLOW_PRIVATE}=1)",
                suggestion="use a public URL; internal and private addresses are blocked",
            )
        failure: Exception | None = None
        for ip in allowed:
            try:
                return await self._inner.connect_tcp(
                    str(ip),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedAddressError("unix sockets are not reachable through this tool")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _resolve(host: str, port: int, timeout: float | None) -> list[IPAddress]:
    literal = _ip_literal(host)
    if literal is not None:
        return [literal]
    try:
        with anyio.fail_after(timeout):
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"resolving {host} timed out") from None
    except OSError as exc:
        raise httpcore.ConnectError(f"cannot resolve host {host!r}: {exc}") from None
    seen: list[IPAddress] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if ip not in seen:
            seen.append(ip)
    if not seen:
        raise httpcore.ConnectError(f"host {host!r} has no IPv4 or IPv6 address")
    return seen


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
