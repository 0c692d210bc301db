"""MCP servers as Tool resources: the client side, in the agent process that uses them.

A Tool with `spec.mcp` names a server: `command` (stdio, a child of this process) or `url`
(streamable HTTP). Each server's tools become Registry entries `{resource}__{export}` whose
handler forwards the call, so policies, timeouts, middleware, loop detection and truncation
apply as to any tool. The official `mcp` SDK does the protocol; it is imported only by agents
that have MCP Tools.

Lifecycle: a runner task per server connects (bounded by `startupTimeoutMs`), keeps the
session until the connection ends, and reconnects with back-off. A stdio server is started
through a tiny exec wrapper that sets PR_SET_PDEATHSIG first, so it dies with this process
even under SIGKILL. A failed start, a crash or a protocol error is a tool error
(`E_TOOL_MCP`) naming the server and its stderr's tail; a call never waits for a server that
is down for longer than a moment.

Export names (documented in docs/mcp.md): every character outside `[A-Za-z0-9_-]` becomes
`_`, runs of `_` become one, and leading and trailing `_` are dropped (so no name holds the
`__` separator); an empty result is `tool`; a clash gets `_2`, `_3`... in the server's order;
a full name over 64 characters is cut and ends in `_` and 8 hex digits of the server's name's
SHA-1.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Literal, TextIO

import msgspec
import structlog

from agentproc.tool_registry import ToolEntry, ToolRegistry, make_entry
from goondan.bundle.model import McpServerSpec, Resource, ToolSpec
from goondan.bundle.names import TOOL_SEPARATOR
from goondan.bundle.values import describe_source, resolve_value
from goondan.tools import ToolContext, ToolError, ToolErrorInfo, ToolResult, ToolSource
from ipc.error_codes import ErrorCode

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

MAX_NAME = 64
STDERR_TAIL_CHARS = 2000
# A chatty server's stderr file is cut back to its tail past this size, checked this often.
STDERR_MAX_BYTES = 1024 * 1024
STDERR_KEEP_BYTES = 64 * 1024
STDERR_CHECK_S = 30.0
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
CLOSE_TIMEOUT_S = 10.0  # the SDK's own shutdown takes at most about 6 s
STABLE_AFTER_S = 10.0  # a connection that lived this long resets the back-off
WAIT_FOR_RESTART_S = 2.0  # a call waits for a restart due this soon, else fails at once
_INVALID = re.compile(r"[^A-Za-z0-9_-]")
_UNDERSCORES = re.compile(r"_{2,}")
_PYTHON = frozenset({"python", "python3"})

# Run as `python -I -S -c _EXEC PARENT_PID ARGV...`: ask for SIGKILL when the agent dies (kept
# across exec), give up if it is already gone, then become the server. Interpreted without
# site-packages, so it costs a few milliseconds, not an SDK import.
_EXEC = """import ctypes, os, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"cannot run {sys.argv[2]!r}: {exc.strerror}\\n")
    os._exit(127)
"""


def export_names(resource: str, tools: list[str]) -> dict[str, str]:
    """Export name -> the server's tool name, by the rule in the module docstring."""
    out: dict[str, str] = {}
    for tool in tools:
        base = _UNDERSCORES.sub("_", _INVALID.sub("_", tool)).strip("_") or "tool"
        room = MAX_NAME - len(resource) - len(TOOL_SEPARATOR)
        if len(base) > room:
            digest = hashlib.sha1(tool.encode()).hexdigest()[:8]
            base = base[: max(room - 9, 1)].rstrip("_") + "_" + digest
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base}_{n}"
        out[name] = tool
    return out


def selected(spec: ToolSpec, name: str) -> bool:
    """Whether the server's tool `name` passes `include` / `exclude` (globs)."""
    if spec.include is not None and not any(fnmatchcase(name, p) for p in spec.include):
        return False
    return not any(fnmatchcase(name, p) for p in spec.exclude)


class McpError(ToolError):
    code = ErrorCode.E_TOOL_MCP


State = Literal["idle", "starting", "ready", "backoff", "closed"]


class McpServer:
    """One Tool resource's server: its connection, restarts, tools and calls."""

    def __init__(
        self,
        resource: Resource,
        *,
        on_tools: Callable[[McpServer], None] | None = None,
        on_refresh: Callable[[asyncio.Task[None]], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """`on_tools(server)`: its tool list is new; `on_refresh(task)`: a re-listing after
        `list_changed` is under way (the registry lets the next step wait for it)."""
        self.resource = resource
        self.name = resource.name
        tool_spec: ToolSpec = resource.spec
        assert tool_spec.mcp is not None
        self.tool_spec = tool_spec
        self.spec: McpServerSpec = tool_spec.mcp
        self.environ = os.environ if env is None else env
        self.on_tools = on_tools
        self.on_refresh = on_refresh
        self.state: State = "idle"
        self.tools: list[Any] = []  # mcp_types.Tool, as the server listed them
        self.exports: dict[str, str] = {}  # export name -> server tool name
        self.last_error: str | None = None
        self.stderr_tail = ""
        self.starts = 0
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._dead = asyncio.Event()
        self._outcome: asyncio.Future[None] | None = None  # of the attempt under way
        self._next_attempt = 0.0  # monotonic time of the next attempt, in back-off
        self._attempts = 0  # failed attempts since the last stable connection
        self._connected_at = 0.0
        self._errlog: TextIO | None = None  # the current server's stderr
        self._scope: Any = None  # anyio.CancelScope of the connection under way
        self._refresh: asyncio.Task[None] | None = None
        self._log = structlog.get_logger().bind(mcpServer=self.name)

    @property
    def kind(self) -> str:
        return "http" if self.spec.url else "stdio"

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> bool:
        """Start the runner and wait for the first connection (bounded by the startup time
        limit). False when it failed: the runner goes on retrying with back-off."""
        loop = asyncio.get_running_loop()
        self._outcome = loop.create_future()
        self._task = loop.create_task(self._run(), name=f"mcp:{self.name}")
        try:
            await asyncio.shield(self._outcome)
        except McpError:
            return False
        return True

    async def aclose(self) -> None:
        """Stop the server (stdio: stdin closed, then SIGTERM, then SIGKILL, as the SDK does)."""
        self.state = "closed"
        self._dead.set()
        if self._scope is not None:
            self._scope.cancel()  # anyio's own cancel: the SDK's shielded shutdown still runs
        if self._refresh is not None and not self._refresh.done():
            self._refresh.cancel()
        task = self._task
        if task is not None and not task.done():
            done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)
            if not done:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    @property
    def closed(self) -> bool:
        return self.state == "closed"

    async def _run(self) -> None:
        while not self.closed:
            try:
                await self._serve_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - any failure is a restart, logged
                self._down(_describe(exc))
            else:
                self._down(self.last_error or "the connection ended")
            if self.closed:
                return
            self._log.warning(
                "MCP server is down; restarting",
                error=self.last_error,
                retryInS=max(0.0, round(self._next_attempt - time.monotonic(), 1)),
            )
            await asyncio.sleep(max(0.0, self._next_attempt - time.monotonic()))

    def _down(self, why: str) -> None:
        """The connection (or the attempt) ended: fail whoever waits for it, and plan the next
        attempt. Called as soon as the end is seen, before the transport's teardown."""
        if self.state in ("backoff", "closed"):
            return
        self.last_error = why
        self._session = None
        self._dead.set()
        if self.state == "ready" and time.monotonic() - self._connected_at >= STABLE_AFTER_S:
            self._attempts = 0
        delay = BACKOFF_S[min(self._attempts, len(BACKOFF_S) - 1)]
        self._attempts += 1
        self._next_attempt = time.monotonic() + delay
        self.stderr_tail = self._read_stderr()
        old = self._outcome
        if old is not None and not old.done():
            old.set_exception(McpError(self._message("could not start")))
            old.exception()  # retrieved: nobody may be waiting
        self._outcome = asyncio.get_running_loop().create_future()
        self.state = "backoff"

    async def _serve_once(self) -> None:
        """Connect, list the tools, then hold the session until the connection ends."""
        import anyio
        from mcp.client.session import ClientSession

        self.state = "starting"
        self.starts += 1
        self._dead = asyncio.Event()
        errlog = stderr_file()
        self._errlog = errlog
        # The start-up limit is this scope's deadline, lifted once the server answered; an
        # anyio scope (not asyncio.timeout) so that the SDK's shielded shutdown of a server
        # still runs when it fires, or when `aclose` cancels.
        scope = anyio.CancelScope(
            deadline=anyio.current_time() + self.spec.startup_timeout_ms / 1000
        )
        self._scope = scope
        try:
            with scope:
                async with contextlib.AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._transport(errlog))
                    relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
                    group = await stack.enter_async_context(anyio.create_task_group())
                    stack.callback(group.cancel_scope.cancel)
                    group.start_soon(self._relay, read, relay_in)
                    session = await stack.enter_async_context(
                        ClientSession(relay_out, write, message_handler=self._on_message)
                    )
                    await session.initialize()
                    await self._list(session)
                    scope.deadline = math.inf
                    if self._dead.is_set():
                        return
                    self._session = session
                    self.state = "ready"
                    self._connected_at = time.monotonic()
                    self.last_error = None
                    if self._outcome is not None and not self._outcome.done():
                        self._outcome.set_result(None)
                    self._log.info("MCP server ready", tools=list(self.exports))
                    while not self._dead.is_set():
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(STDERR_CHECK_S):
                                await self._dead.wait()
                        trim_stderr(errlog)
            if scope.cancelled_caught and not self.closed:
                self._down(
                    f"it did not answer within startupTimeoutMs ({self.spec.startup_timeout_ms} ms)"
                )
        finally:
            self._scope = None
            self._session = None
            self.stderr_tail = self._read_stderr() or self.stderr_tail
            self._errlog = None
            errlog.close()

    def _read_stderr(self) -> str:
        return _tail(self._errlog) if self._errlog is not None else self.stderr_tail

    def _transport(self, errlog: TextIO) -> contextlib.AbstractAsyncContextManager[Any]:
        if self.spec.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = self._values(self.spec.headers, "headers")
            url = self.spec.url

            @contextlib.asynccontextmanager
            async def http() -> AsyncIterator[Any]:
                # The transport leaves a client it was given open: it is closed here.
                async with create_mcp_http_client(headers=headers) as client:
                    async with streamable_http_client(url, http_client=client) as streams:
                        yield streams

            return http()
        from mcp.client.stdio import StdioServerParameters, stdio_client

        argv = list(self.spec.command)
        if argv[0] in _PYTHON:  # the interpreter goondan runs in, with the SDK it installed
            argv[0] = sys.executable
        cwd = self.resource.source.root
        if self.spec.cwd is not None:
            cwd = (cwd / self.spec.cwd).resolve()
        params = StdioServerParameters(
            command=sys.executable,
            args=["-I", "-S", "-c", _EXEC, str(os.getpid()), *argv],
            env=self._values(self.spec.env, "env"),
            cwd=str(cwd),
        )
        return stdio_client(params, errlog=errlog)

    def _values(self, sources: dict[str, Any], field: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, source in sources.items():
            value = resolve_value(source, self.environ)
            if value is None:
                raise McpError(
                    f"spec.mcp.{field}.{key} comes from {describe_source(source)}, which is "
                    "not set where the agent runs"
                )
            out[key] = value
        return out

    async def _relay(self, read: Any, out: Any) -> None:
        """Pass the transport's messages on; its end is the connection's end (a cancel is our
        own shutdown, not an end to report)."""
        try:
            async with out:
                async for message in read:
                    await out.send(message)
        except Exception as exc:  # noqa: BLE001 - a broken transport is the same end
            self.last_error = _describe(exc)
        self._down(self.last_error or "the server closed the connection")

    # -- tools -------------------------------------------------------------------------------

    async def _list(self, session: ClientSession) -> None:
        tools: list[Any] = []
        cursor = None
        while True:
            from mcp_types import PaginatedRequestParams

            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = [t for t in tools if selected(self.tool_spec, t.name)]
        self.exports = export_names(self.name, [t.name for t in self.tools])
        if self.on_tools is not None:
            self.on_tools(self)

    async def _on_message(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            if self.on_tools is not None and (self._refresh is None or self._refresh.done()):
                self._refresh = asyncio.get_running_loop().create_task(self._relist())
                if self.on_refresh is not None:
                    self.on_refresh(self._refresh)

    async def _relist(self) -> None:
        session = self._session
        if session is None:
            return  # the next connection lists them anyway
        try:
            await self._list(session)
            self._log.info("MCP server's tools changed", tools=list(self.exports))
        except Exception as exc:  # noqa: BLE001 - keep the old list; the next call will tell
            self._log.warning("MCP server's tools could not be listed again", error=str(exc))

    # -- calls -------------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, Any]) -> ToolResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED

        session = await self._usable()
        try:
            result = await session.call_tool(tool, args)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or self._dead.is_set() or self._session is not session:
                # Over HTTP nothing else tells us the server went away: reconnect (with
                # back-off) rather than keep a session every call would fail on.
                self._down(f"the connection ended: {exc.message}")
                raise McpError(self._message(f"died during the call to '{tool}'")) from None
            raise McpError(
                f"MCP server '{self.name}' answered '{tool}' with an error: {exc}"
            ) from None
        return to_result(result)

    async def _usable(self) -> ClientSession:
        if self.state == "backoff" and self._next_attempt - time.monotonic() > WAIT_FOR_RESTART_S:
            raise McpError(self._message("is not running; it is being restarted"))
        if self.state in ("starting", "backoff") and self._outcome is not None:
            with contextlib.suppress(McpError):
                await asyncio.shield(self._outcome)
        session = self._session
        if session is None or self.state != "ready":
            raise McpError(self._message("is not running"))
        return session

    def failure(self) -> str:
        """Why it is not running: the server, its last error and its stderr's tail."""
        return self._message("could not start")

    def _message(self, what: str) -> str:
        where = " ".join(self.spec.command) if self.spec.command else self.spec.url
        text = f"MCP server '{self.name}' ({where}) {what}"
        if self.last_error:
            text += f": {self.last_error}"
        tail = self._read_stderr().strip()
        if tail:
            text += f"\nstderr (last lines):\n{tail}"
        return text

    def entries(self) -> list[ToolEntry]:
        """Registry entries for the listed tools."""
        out = []
        by_name = {t.name: t for t in self.tools}
        origin = ToolSource(type="mcp", name=self.name)
        for export, tool_name in self.exports.items():
            tool = by_name[tool_name]
            out.append(self._entry(export, tool_name, tool.description or "", tool.input_schema))
        return [_with_origin(e, origin) for e in out]

    def _entry(self, export: str, tool: str, description: str, schema: dict[str, Any]) -> ToolEntry:
        async def handler(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
            return await self.call(tool, args)

        name = f"{self.name}{TOOL_SEPARATOR}{export}"
        params = dict(schema) if isinstance(schema, dict) else {}
        params.setdefault("type", "object")
        spec = self.tool_spec
        try:
            return make_entry(
                name,
                description,
                params,
                handler,
                error_message_limit=spec.error_message_limit,
                timeout_ms=spec.timeout_ms,
                sequential=spec.sequential,
            )
        except ValueError:
            # A schema our validator cannot compile (a newer draft): the server checks the
            # arguments itself.
            entry = make_entry(
                name,
                description,
                {"type": "object"},
                handler,
                error_message_limit=spec.error_message_limit,
                timeout_ms=spec.timeout_ms,
                sequential=spec.sequential,
            )
            return msgspec.structs.replace(entry, parameters=params)

    def placeholder_entries(self) -> list[ToolEntry]:
        """For a server that did not start: its `include`d names (without globs), whose calls
        report why, so the model and the operator learn it instead of seeing no tool."""
        out = []
        names = [n for n in self.tool_spec.include or () if not any(c in n for c in "*?[")]
        for export, tool in export_names(self.name, names).items():
            entry = self._entry(export, tool, f"(MCP server '{self.name}' is not running)", {})
            out.append(_with_origin(entry, ToolSource(type="mcp", name=self.name)))
        return out


def _with_origin(entry: ToolEntry, origin: ToolSource) -> ToolEntry:
    return msgspec.structs.replace(entry, origin=origin)


def to_result(result: Any) -> ToolResult:
    """A `CallToolResult` as the LLM reads it: `structuredContent` when present, else the
    text; images and audio described in text (their data stays in `details`)."""
    texts: list[str] = []
    media: list[dict[str, Any]] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(block.data) * 3 // 4
            texts.append(f"[{kind}: {block.mime_type}, about {size} bytes]")
            media.append({"type": kind, "mimeType": block.mime_type, "data": block.data})
        elif kind == "resource":
            inner = block.resource
            text = getattr(inner, "text", None)
            texts.append(text if text is not None else f"[resource: {inner.uri}]")
        elif kind == "resource_link":
            texts.append(f"[resource link: {block.uri}]")
    details = {"media": media} if media else None
    if result.is_error:
        message = "\n".join(texts) or "the MCP tool reported an error without a message"
        return ToolResult.fail(
            ToolErrorInfo(code=ErrorCode.E_TOOL_MCP, name="McpToolError", message=message),
            details=details,
        )
    if result.structured_content is not None:
        return ToolResult.ok(result.structured_content, details=details)
    return ToolResult.ok("\n".join(texts), details=details)


def stderr_file() -> TextIO:
    """A temporary file for a server's stderr, in O_APPEND mode: the server writes through its
    own descriptor of the same open file, and our reads of the tail (which seek) must not move
    where its next line lands. (`TemporaryFile("a+")` alone does not set O_APPEND.)"""
    errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
    fd = errlog.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
    return errlog


def trim_stderr(errlog: TextIO, limit: int = STDERR_MAX_BYTES) -> None:
    """Keep a server's stderr file bounded: past `limit` bytes, only its last
    STDERR_KEEP_BYTES stay. The file is in append mode, so the server's next write still
    lands at the (new) end; a line written during the cut may be lost."""
    try:
        fd = errlog.fileno()
        size = os.fstat(fd).st_size
        if size <= limit:
            return
        keep = os.pread(fd, STDERR_KEEP_BYTES, size - STDERR_KEEP_BYTES)
        os.ftruncate(fd, 0)
        os.write(fd, keep)
    except (OSError, ValueError):
        pass


def _tail(errlog: TextIO) -> str:
    try:
        errlog.flush()
        size = errlog.seek(0, os.SEEK_END)
        errlog.seek(max(0, size - STDERR_TAIL_CHARS * 2))
        text = errlog.read()
    except (OSError, ValueError):
        return ""
    return text[-STDERR_TAIL_CHARS:]


def _describe(exc: BaseException) -> str:
    """The innermost useful message of an exception (anyio wraps them in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ToolError) else f"{type(exc).__name__}: {text}"


class McpTools:
    """This agent's MCP servers, and their entries in its Tool Registry."""

    def __init__(self, registry: ToolRegistry, resources: list[Resource]) -> None:
        self.registry = registry
        self.servers = [
            McpServer(r, on_tools=self._on_tools, on_refresh=self._track)
            for r in resources
            if r.spec.mcp is not None
        ]

    def _on_tools(self, server: McpServer) -> None:
        self.registry.replace_group(server.name, server.entries())

    def _track(self, task: asyncio.Task[None]) -> None:
        self.registry.refreshing.add(task)
        task.add_done_callback(self.registry.refreshing.discard)

    async def start(self) -> list[McpServer]:
        """Start every server at once; the ones that failed (they go on retrying)."""
        if not self.servers:
            return []
        ok = await asyncio.gather(*(s.start() for s in self.servers))
        failed = [s for s, up in zip(self.servers, ok, strict=True) if not up]
        for server in failed:
            structlog.get_logger().warning(
                "MCP server could not start; its tools fail until it does",
                mcpServer=server.name,
                error=server.failure(),
            )
            placeholders = server.placeholder_entries()
            if placeholders:
                self.registry.replace_group(server.name, placeholders)
        return failed

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self.servers))
