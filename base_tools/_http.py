"""The one way @goondan/base tools talk HTTP: an httpx client whose every connection goes through
the address guard (`_netguard.py`), with redirects capped and bodies read up to a limit.

Proxies from the environment (HTTP_PROXY, ...) and .netrc are ignored (`trust_env=False`): with a
proxy the guard would only ever see the proxy's address.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from collections.abc import AsyncIterator, Iterator

import httpcore
import httpx

from base_tools._netguard import GuardedBackend
from base_tools._policy import http_policy

# httpcore's exceptions as httpx's, most specific first (what httpx's own transport does).
_EXCEPTIONS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for source, target in _EXCEPTIONS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class _Stream(httpx.AsyncByteStream):
    def __init__(self, inner: httpcore.Response) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors():
            async for part in self._inner.aiter_stream():
                yield part

    async def aclose(self) -> None:
        await self._inner.aclose()


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """Built once: loading the CA bundle costs more than a small request."""
    return httpx.create_ssl_context()


class GuardedTransport(httpx.AsyncBaseTransport):
    """httpx's request/response over an httpcore pool that connects through `GuardedBackend`."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_ssl_context(),
            network_backend=backend,
            max_connections=10,
            http1=True,
            http2=False,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            response = await self._pool.handle_async_request(core_request)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Stream(response),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def guarded_client(
    timeout_s: float, inner: httpcore.AsyncNetworkBackend | None = None
) -> httpx.AsyncClient:
    """A client for one tool call; `inner` replaces the real network (tests only)."""
    policy = http_policy()
    return httpx.AsyncClient(
        transport=GuardedTransport(GuardedBackend(policy, inner)),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=True,
        max_redirects=policy.max_redirects,
        trust_env=False,
    )


async def read_limited(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """Up to `max_bytes` of the (decoded) body, and whether there was more."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > max_bytes:
            return bytes(data[:max_bytes]), True
    return bytes(data), False


def decode_text(response: httpx.Response, body: bytes) -> str:
    try:
        return body.decode(response.charset_encoding or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name
        return body.decode("utf-8", errors="replace")
