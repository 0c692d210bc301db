"""What the built-in connectors share: settings, signatures, payload fields, an HTTP endpoint."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from goondan import ConnectorConfigError, ConnectorContext, ErrorCode

DEFAULT_HOST = "127.0.0.1"
SHUTDOWN_TIMEOUT_S = 3.0  # in-flight requests get this long once the connector is stopping
BODY_TIMEOUT_S = 30  # a request body must arrive within this (config BODY_TIMEOUT_SECONDS)
MAX_BODY_BYTES = 1024 * 1024  # larger bodies get 413 (config MAX_BODY_BYTES)

Handler = Callable[[web.Request, bytes], Awaitable[web.StreamResponse]]


# -- settings ----------------------------------------------------------------------------------


def setting(ctx: ConnectorContext, *keys: str, secrets: bool = False) -> str | None:
    """The first non-empty `config` value among `keys` (then `secrets`, with `secrets=True`)."""
    sources = (ctx.config, ctx.secrets) if secrets else (ctx.config,)
    for key in keys:
        for source in sources:
            value = source.get(key, "").strip()
            if value:
                return value
    return None


def secret(ctx: ConnectorContext, *keys: str) -> str | None:
    """The first non-empty secret among `keys` (not stripped: a secret is used as written)."""
    for key in keys:
        value = ctx.secrets.get(key)
        if value:
            return value
    return None


def int_setting(
    ctx: ConnectorContext, *keys: str, default: int, minimum: int = 0, secrets: bool = False
) -> int:
    text = setting(ctx, *keys, secrets=secrets)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConnectorConfigError(f"config {keys[0]} must be an integer, got {text!r}") from None
    if value < minimum:
        raise ConnectorConfigError(f"config {keys[0]} must be at least {minimum}, got {value}")
    return value


def flag(ctx: ConnectorContext, *keys: str, default: bool = False) -> bool:
    text = setting(ctx, *keys)
    if text is None:
        return default
    return text.lower() in ("1", "true", "yes", "on")


def truthy(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on")


# -- payloads ----------------------------------------------------------------------------------


def text_field(payload: Mapping[str, Any], *keys: str) -> str | None:
    """The first non-empty string among `keys` (upstream's `readString`)."""
    for key in keys:
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def ident(value: object) -> str | None:
    """An id as text: strings as they are, integers without a fraction (Telegram chat ids)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return None


def record(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


# -- signatures --------------------------------------------------------------------------------


def hmac_sha256_hex(key: str, message: bytes) -> str:
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def same(expected: str, received: str) -> bool:
    """Timing-safe comparison of two signatures."""
    return hmac.compare_digest(expected.encode(), received.encode())


# -- an HTTP endpoint --------------------------------------------------------------------------


def normalize_path(path: str | None) -> str:
    """`hooks/` -> `/hooks`; empty -> `/` (upstream's webhook path normalisation)."""
    text = (path or "").strip()
    if not text:
        return "/"
    if not text.startswith("/"):
        text = "/" + text
    return text.rstrip("/") or "/"


def json_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


async def serve_post(
    ctx: ConnectorContext,
    handle: Handler,
    *,
    name: str,
    default_port: int,
    port_keys: tuple[str, ...] = ("PORT",),
    path_keys: tuple[str, ...] = ("PATH",),
    subpaths: tuple[str, ...] = (),
) -> None:
    """Serve POST requests on config HOST (127.0.0.1) / PORT / PATH (and PATH + each of
    `subpaths`) until the connector is asked to stop; `handle(request, raw_body)` answers
    them. Other paths get 404, other
    methods 405, an exception in `handle` 500 (logged). A body larger than MAX_BODY_BYTES gets
    413, one that has not arrived within BODY_TIMEOUT_SECONDS 408; either way the connection is
    closed, so a slow or endless sender holds nothing open."""
    host = setting(ctx, "HOST") or DEFAULT_HOST
    body_timeout = int_setting(ctx, "BODY_TIMEOUT_SECONDS", default=BODY_TIMEOUT_S, minimum=1)
    max_body = int_setting(ctx, "MAX_BODY_BYTES", default=MAX_BODY_BYTES, minimum=1)
    port = int_setting(ctx, *port_keys, default=default_port)
    if port > 65535:
        raise ConnectorConfigError(f"config {port_keys[0]} must be a TCP port, got {port}")
    path = normalize_path(setting(ctx, *path_keys))
    served = {path, *(normalize_path(path.rstrip("/") + sub) for sub in subpaths)}

    async def dispatch(request: web.Request) -> web.StreamResponse:
        if normalize_path(request.path) not in served:
            return web.Response(status=404, text="Not Found")
        if request.method != "POST":
            return web.Response(status=405, text="Method Not Allowed", headers={"Allow": "POST"})
        try:
            try:
                async with asyncio.timeout(body_timeout):
                    body = await request.read()
            except TimeoutError:
                ctx.logger.warning(f"[{name}] request body too slow", seconds=body_timeout)
                response = json_error(
                    408,
                    ErrorCode.E_BODY_TIMEOUT,
                    f"the request body did not arrive within {body_timeout} s",
                )
                response.force_close()
                return response
            return await handle(request, body)
        except web.HTTPException:
            raise
        except Exception as exc:
            ctx.logger.exception(f"[{name}] request failed", error=str(exc))
            return web.Response(status=500, text="Internal Server Error")

    app = web.Application(client_max_size=max_body)
    app.router.add_route("*", "/{tail:.*}", dispatch)
    # No lingering: aiohttp would otherwise go on reading an unread body for 10 s after a
    # 408 or 413, which is what the limits are there to stop.
    runner = web.AppRunner(
        app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S, lingering_time=0
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise ConnectorConfigError(
                f"[{name}] cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        ctx.logger.info(f"[{name}] listening", host=host, port=port, path=path)
        await ctx.stopping.wait()
        ctx.logger.info(f"[{name}] stopping")
    finally:
        await runner.cleanup()
