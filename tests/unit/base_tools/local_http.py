"""A small HTTP server on a loopback address for the http-fetch tests (127.0.0.1 or ::1)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiohttp import web


class LocalServer:
    """Answers /hello, /json, /echo, /big, /status/<n>, /slow, /redirect?to=, /loop, /latin1;
    `hits` lists every path it was asked for."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.hits: list[str] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def __aenter__(self) -> LocalServer:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/hello", _hello)
        app.router.add_get("/json", _json)
        app.router.add_post("/echo", _echo)
        app.router.add_get("/big", _big)
        app.router.add_get("/status/{code}", _status)
        app.router.add_get("/slow", _slow)
        app.router.add_get("/redirect", _redirect)
        app.router.add_get("/loop", _loop)
        app.router.add_get("/latin1", _latin1)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.bind((self.host, 0))
        await web.SockSite(self._runner, sock).start()
        self.port = sock.getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.hits.append(request.path)
        response: web.StreamResponse = await handler(request)
        return response


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text="hello", headers={"X-Test": "1"})


async def _json(request: web.Request) -> web.Response:
    return web.json_response({"a": [1, 2]})


async def _echo(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "method": request.method,
            "contentType": request.headers.get("Content-Type"),
            "auth": request.headers.get("X-Auth"),
            "body": await request.text(),
        }
    )


async def _big(request: web.Request) -> web.Response:
    return web.Response(body=b"x" * 10_000)


async def _status(request: web.Request) -> web.Response:
    return web.Response(status=int(request.match_info["code"]), text="status")


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(2)
    return web.Response(text="late")


async def _redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound(request.query["to"])


async def _loop(request: web.Request) -> web.Response:
    raise web.HTTPFound("/loop")


async def _latin1(request: web.Request) -> web.Response:
    return web.Response(body="café".encode("latin-1"), content_type="text/plain", charset="latin-1")
