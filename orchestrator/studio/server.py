"""The studio's HTTP server (aiohttp), run inside the daemon when `run --studio` asks for it.

Every request needs the studio's token: `?token=` once (the answer sets it as a cookie),
then the cookie, or an `Authorization: Bearer` header. The pages are plain files shipped in
the package (`static/`); the data comes from JSON endpoints under `/api/` and a stream of
server-sent events (`/api/stream`). Nothing here is on the routing path: the swarm's table is
the supervisor's own (read when asked), everything else comes from the files agents write.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import re
import secrets
import socket
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import structlog
from aiohttp import web

from goondan.files import replace_file
from goondan.paths import BadInstanceKey, StatePaths, key_of, storage_name
from ipc import wire
from orchestrator.studio.events import EventStore, matches

COOKIE = "goondan_studio"
TOKEN_FILE = "studio.token"  # in the state root, 0600: the same token across restarts
INFO_FILE = "studio.json"  # in run/: where `goondan studio` finds the URL
POLL_S = 0.5  # how often the files are read while a stream is open
KEEPALIVE_S = 5.0  # a comment line this often: a gone viewer's stream ends at the write
_STATIC = {
    "/": ("index.html", "text/html"),
    "/studio.js": ("studio.js", "text/javascript"),
    "/studio.css": ("studio.css", "text/css"),
}


class StudioAddressError(ValueError):
    pass


def parse_address(text: str, *, allow_remote: bool = False) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6; port 0 picks a free one). A host that is not a
    loopback address is refused unless `allow_remote`: the studio shows every conversation."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise StudioAddressError(f"expected HOST:PORT, e.g. 127.0.0.1:8765, not {text!r}")
    if not allow_remote and not _is_loopback(host):
        raise StudioAddressError(
            f"{host} is not a loopback address: the studio shows every conversation, so it "
            "listens on 127.0.0.1 unless --studio-allow-remote says otherwise"
        )
    return host, int(port_text)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the daemon starts so that a port in use stops it
    with a clear error rather than a studio that silently is not there."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(128)
        sock.setblocking(False)
        sock.set_inheritable(False)
    except OSError:
        sock.close()
        raise
    return sock


def load_token(paths: StatePaths) -> str:
    """The studio's token, made (0600) the first time."""
    path = paths.root / TOKEN_FILE
    try:
        token = path.read_text().strip()
        if len(token) >= 32:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


_TRACE_ID = re.compile("[0-9a-f]{32}")


class Studio:
    """The web studio of one running daemon."""

    def __init__(
        self,
        sock: socket.socket,
        paths: StatePaths,
        swarm: Callable[[], str],
        status: Callable[[], wire.Status],
        connectors: Callable[[], dict[str, str]],
        cancel: Callable[[str], Awaitable[list[wire.CancelledTurn]]],
        flush: Callable[[], Awaitable[object]],
    ) -> None:
        """`swarm`, `status`, `connectors` (name -> the agent it feeds) are read per request:
        a reload may change them. `cancel(trace_id)` cancels a trace's running turns, as
        `goondan cancel --trace` does; `flush()` has the running agents write the runtime
        events they hold, as `goondan logs` does before it reads."""
        self._sock = sock
        self.paths = paths
        self._swarm = swarm
        self._status = status
        self._connectors = connectors
        self._cancel = cancel
        self._flush = flush
        self.token = load_token(paths)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/"
        self._stores: dict[str, EventStore] = {}
        self._read_lock = asyncio.Lock()
        self._new = asyncio.Condition()
        self._streams = 0
        self._poller: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._log = structlog.get_logger().bind(component="studio")
        self._assets = {
            route: (resources.files(__package__).joinpath("static", name).read_bytes(), kind)
            for route, (name, kind) in _STATIC.items()
        }

    @property
    def info_file(self) -> Path:
        return self.paths.run_dir / INFO_FILE

    async def start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/", self._asset)
        app.router.add_get("/studio.js", self._asset)
        app.router.add_get("/studio.css", self._asset)
        app.router.add_get("/api/swarm", self._api_swarm)
        app.router.add_get("/api/requests", self._api_requests)
        app.router.add_get("/api/traces/{trace}", self._api_trace)
        app.router.add_post("/api/traces/{trace}/cancel", self._api_cancel)
        app.router.add_get("/api/events", self._api_events)
        app.router.add_get("/api/instances", self._api_instances)
        app.router.add_get("/api/instances/{key}/{agent}", self._api_conversation)
        app.router.add_get("/api/stream", self._api_stream)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock, shutdown_timeout=1.0).start()
        info = {"url": self.url, "token": self.token, "pid": os.getpid()}
        # Whole or not at all: `goondan studio` may read it at any moment.
        replace_file(self.info_file, json.dumps(info).encode())
        self._log.info("studio listening", url=self.url, open="goondan studio")

    async def close(self) -> None:
        self._closing.set()
        async with self._new:
            self._new.notify_all()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._runner is not None:
            await self._runner.cleanup()
        else:
            self._sock.close()
        self.info_file.unlink(missing_ok=True)

    # -- reading -------------------------------------------------------------------------------

    def store(self) -> EventStore:
        swarm = self._swarm()
        store = self._stores.get(swarm)
        if store is None:
            store = self._stores[swarm] = EventStore(self.paths.swarm_dir(swarm) / "agents")
        return store

    async def refresh(self) -> list[dict[str, Any]]:
        """Read what the agents' files have gained (in a thread), and wake the streams."""
        async with self._read_lock:
            store = self.store()
            new = await asyncio.to_thread(store.collect)
            store.take(new)
        if new:
            async with self._new:
                self._new.notify_all()
        return new

    async def _poll(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # a bug here must not end the daemon, nor the stream
                self._log.exception("studio: reading runtime events failed")
            await asyncio.sleep(POLL_S)

    def swarm_view(self) -> dict[str, Any]:
        status = self._status()
        store = self.store()
        return {
            "swarm": status.swarm,
            "entryAgent": status.entry_agent,
            "pid": status.pid,
            "startedAt": status.started_at,
            "processes": msgspec.to_builtins(status.processes),
            "connectors": self._connectors(),
            "delegations": [
                {"from": caller, "to": callee, "count": count}
                for (caller, callee), count in sorted(store.delegations.items())
            ],
        }

    # -- HTTP ------------------------------------------------------------------------------------

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.query.get("token")
        if given is None:
            given = request.cookies.get(COOKIE)
        if given is None and request.headers.get("Authorization", "").startswith("Bearer "):
            given = request.headers["Authorization"][7:]
        if given is None or not secrets.compare_digest(given.encode(), self.token.encode()):
            return web.Response(
                status=401,
                text="goondan studio: a token is needed; `goondan studio` prints the URL with it\n",
            )
        if "token" in request.query and request.method == "GET" and request.path == "/":
            # Out of the address bar (and history) once it is a cookie.
            response: web.StreamResponse = web.Response(status=302, headers={"Location": "/"})
        else:
            response = await handler(request)
        if request.cookies.get(COOKIE) != self.token:
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
        return response

    async def _asset(self, request: web.Request) -> web.Response:
        body, kind = self._assets[request.path]
        return web.Response(
            body=body, content_type=kind, charset="utf-8", headers={"Cache-Control": "no-store"}
        )

    async def _api_swarm(self, request: web.Request) -> web.Response:
        await self.refresh()
        return web.json_response(self.swarm_view())

    async def _api_requests(self, request: web.Request) -> web.Response:
        await self.refresh()
        return web.json_response(self.store().requests())

    async def _api_trace(self, request: web.Request) -> web.Response:
        # Agents write their events in batches, up to a second after a turn: a trace opened
        # as its request answers shows to its end.
        await self._flush()
        await self.refresh()
        trace = self.store().trace(request.match_info["trace"])
        if trace is None:
            return web.json_response({"error": "no such trace among the recent ones"}, status=404)
        return web.json_response(trace)

    async def _api_cancel(self, request: web.Request) -> web.Response:
        """Cancel the trace's running turns, down its delegation chain (POST: a page of another
        site cannot send the SameSite cookie with it)."""
        trace_id = request.match_info["trace"]
        if not _TRACE_ID.fullmatch(trace_id):
            return web.json_response({"error": "a trace id is 32 hex digits"}, status=400)
        turns = await self._cancel(trace_id)
        self._log.info("cancel requested in the studio", traceId=trace_id, cancelled=len(turns))
        return web.json_response({"cancelled": msgspec.to_builtins(turns)})

    async def _api_events(self, request: web.Request) -> web.Response:
        await self.refresh()
        q = request.query
        try:
            limit = max(1, min(int(q.get("limit", "200")), 5000))
        except ValueError:
            return web.json_response({"error": "limit is a number"}, status=400)
        events = self.store().tail(
            agent=q.get("agent"), type_prefix=q.get("type"), trace=q.get("trace"), limit=limit
        )
        return web.json_response(events)

    async def _api_instances(self, request: web.Request) -> web.Response:
        rows = await asyncio.to_thread(self._instances)
        return web.json_response(rows)

    def _instances(self) -> list[dict[str, Any]]:
        directory = self.paths.swarm_dir(self._swarm()) / "instances"
        rows: list[dict[str, Any]] = []
        from goondan.paths import conversation_files, stored_agents

        for instance in directory.glob("*"):
            found = stored_agents(instance)
            if not found:
                continue
            agents = [a.name for a in found]
            updated = max(
                p.stat().st_mtime
                for a in found
                for p in (a, *conversation_files(a)[:2])
                if p.exists()
            )
            key = key_of(instance.name) or instance.name
            rows.append({"instanceKey": key, "agents": agents, "updatedAt": updated})
        rows.sort(key=lambda r: r["updatedAt"], reverse=True)
        return rows

    async def _api_conversation(self, request: web.Request) -> web.Response:
        key, agent = request.match_info["key"], request.match_info["agent"]
        try:
            storage_name(key)
            storage_name(agent)
        except BadInstanceKey as exc:
            return web.json_response({"error": str(exc)}, status=400)
        directory = self.paths.conversation_dir(self._swarm(), key, agent)
        # The agent runtime's own reader: the same replay (base, events, folds) it does.
        from agentproc.conversation import read_messages
        from goondan.paths import conversation_stored

        if not (directory.is_dir() or conversation_stored(directory)):
            return web.json_response({"error": f"no conversation {key}/{agent}"}, status=404)

        messages = await asyncio.to_thread(read_messages, directory)
        return web.json_response(
            {"instanceKey": key, "agent": agent, "messages": msgspec.to_builtins(messages)}
        )

    async def _api_stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: `swarm` (the graph, when it changed) and `runtime` (each new
        event, filtered by the query's agent, type and trace)."""
        q = request.query
        agent, type_prefix, trace = q.get("agent"), q.get("type"), q.get("trace")
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        self._streams += 1
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="studio poll")
        try:
            await self.refresh()
            seen = self.store().seq
            last_swarm = b""
            await response.write(b"retry: 1000\n\n")
            loop = asyncio.get_running_loop()
            wrote = loop.time()
            while not self._closing.is_set():
                swarm = json.dumps(self.swarm_view()).encode()
                if swarm != last_swarm:
                    await response.write(b"event: swarm\ndata: " + swarm + b"\n\n")
                    last_swarm, wrote = swarm, loop.time()
                store = self.store()
                fresh = []
                for event in reversed(store.events):  # the newest are at the end
                    if event["seq"] <= seen:
                        break
                    fresh.append(event)
                fresh.reverse()
                if fresh:
                    seen = fresh[-1]["seq"]
                    chunk = b"".join(
                        b"event: runtime\ndata: " + json.dumps(e).encode() + b"\n\n"
                        for e in fresh
                        if matches(e, agent, type_prefix, trace)
                    )
                    if chunk:
                        await response.write(chunk)
                        wrote = loop.time()
                if loop.time() - wrote > KEEPALIVE_S:
                    await response.write(b": keepalive\n\n")
                    wrote = loop.time()
                async with self._new:
                    # The process table changes without new events: look again at least
                    # every other poll.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(POLL_S * 2):
                            await self._new.wait()
                if self._closing.is_set():
                    break
        except ConnectionResetError:  # the viewer left
            pass
        finally:
            self._streams -= 1
            if self._streams == 0 and self._poller is not None:
                self._poller.cancel()
                self._poller = None
        return response
