"""`http-fetch` tool of @goondan/base: HTTP GET and POST for the agent.

Safe by default: http/https only; every connection (redirects included) goes through the
address guard, so loopback, private, link-local, metadata and other internal addresses are
refused unless the operator allows them; redirects are capped; the body is cut at `maxBytes`
with `truncated: true`. A non-2xx status is a normal result (`status`), not an error.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from base_tools._http import decode_text, guarded_client, read_limited
from base_tools._policy import HTTP_MAX_REDIRECTS
from goondan import ErrorCode, ToolContext, ToolError

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_BYTES = 500_000
SCHEMES = ("http", "https")


async def get(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    return await _fetch("GET", args, content=None, content_type=None)


async def post(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    if args.get("body") is not None:
        return await _fetch(
            "POST",
            args,
            content=json.dumps(args["body"]).encode("utf-8"),
            content_type="application/json",
        )
    body_string = args.get("bodyString")
    return await _fetch(
        "POST",
        args,
        content=None if body_string is None else body_string.encode("utf-8"),
        content_type=None,
    )


async def _fetch(
    method: str, args: dict[str, Any], *, content: bytes | None, content_type: str | None
) -> dict[str, Any]:
    url = _checked_url(args["url"])
    timeout_ms = int(args.get("timeoutMs", DEFAULT_TIMEOUT_MS))
    max_bytes = int(args.get("maxBytes", DEFAULT_MAX_BYTES))
    headers = {
        str(name): _header_value(value) for name, value in (args.get("headers") or {}).items()
    }
    if content_type and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = content_type
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_ms / 1000):  # a deadline for the whole exchange
            async with guarded_client(timeout_ms / 1000) as client:
                async with client.stream(method, url, headers=headers, content=content) as response:
                    body, truncated = await read_limited(response, max_bytes)
    except (TimeoutError, httpx.TimeoutException):
        raise ToolError(
            f"{method} {url} timed out after {timeout_ms} ms",
            code=ErrorCode.E_HTTP_TIMEOUT,
            suggestion="retry later or with a larger timeoutMs",
        ) from None
    except httpx.TooManyRedirects:
        raise ToolError(
            f"{method} {url}: too many redirects",
            code=ErrorCode.E_HTTP_TOO_MANY_REDIRECTS,
            suggestion=f"the limit is set by {HTTP_MAX_REDIRECTS}",
        ) from None
    except httpx.UnsupportedProtocol as exc:
        raise ToolError(
            f"{method} {url}: unsupported protocol in a redirect ({exc})",
            code=ErrorCode.E_HTTP_UNSUPPORTED_PROTOCOL,
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise ToolError(
            f"{method} {url} failed: {type(exc).__name__}: {exc}",
            code=ErrorCode.E_HTTP_REQUEST_FAILED,
        ) from None
    return {
        "url": str(response.url),
        "method": method,
        "status": response.status_code,
        "statusText": response.reason_phrase,
        "headers": _headers(response.headers),
        "body": decode_text(response, body),
        "truncated": truncated,
        "durationMs": int((time.monotonic() - started) * 1000),
    }


def _checked_url(raw: str) -> str:
    try:
        url = httpx.URL(raw.strip())
    except httpx.InvalidURL as exc:
        raise ToolError(f"invalid URL {raw!r}: {exc}", code=ErrorCode.E_HTTP_INVALID_URL) from None
    if url.scheme not in SCHEMES:
        raise ToolError(
            f"Unsupported protocol: {url.scheme or '(none)'}: only http and https "
            "URLs can be fetched",
            code=ErrorCode.E_HTTP_UNSUPPORTED_PROTOCOL,
        )
    if not url.host:
        raise ToolError(f"invalid URL {raw!r}: no host", code=ErrorCode.E_HTTP_INVALID_URL)
    return str(url)


def _header_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _headers(headers: httpx.Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.multi_items():
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


handlers = {"get": get, "post": post}
