"""Runs one tool call against the registry and the step's catalog; never raises.

Order (upstream `ToolExecutor`): policy and catalog check, argument validation, handler lookup,
handler call (with its timeout). Every failure becomes a structured error the LLM reads, and
the turn goes on. Sync handlers run in a thread pool of their own, async ones on the loop.

A thread cannot be stopped: a sync call that times out runs on in its thread (and may keep a
core busy). Until it returns, further calls of that tool are refused (`E_TOOL_STILL_RUNNING`),
so one stuck tool holds one thread, not one per call; past `max_abandoned` such threads,
every sync tool is refused, so the pool always has threads for the ones that work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import time
import types
from collections.abc import Callable, Collection, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fastjsonschema
import msgspec
import structlog

from agentproc.deadlines import Deadline, Deadlines
from agentproc.messages import ToolCall
from agentproc.tool_args import ArgumentsError, parse_arguments, problems, summarize
from agentproc.tool_registry import ToolEntry, ToolRegistry
from goondan.settings import DEFAULTS
from goondan.tools import Pending, ToolContext, ToolErrorInfo, ToolResult
from ipc.error_codes import ErrorCode

DEFAULT_ERROR_MESSAGE_LIMIT = 1000
_TRUNCATION_SUFFIX = "... (truncated)"
_encoder = msgspec.json.Encoder()

PendingSubmit = Callable[[Pending, ToolEntry], ToolResult]
"""Starts a `Pending` handler result's work and returns what the LLM reads meanwhile."""


class ToolStillRunning(Exception):
    """A sync tool refused because timed-out calls still hold threads."""

    code = ErrorCode.E_TOOL_STILL_RUNNING
    suggestion = (
        "Do not call this tool again now: tell the user it is stuck. It becomes available "
        "when the earlier call returns or the agent restarts."
    )


def truncate_error_message(message: str, limit: int) -> str:
    """Unchanged at or under `limit`; else exactly `limit` characters ending in the suffix
    (a plain cut when the limit is shorter than the suffix)."""
    if len(message) <= limit:
        return message
    if limit <= len(_TRUNCATION_SUFFIX):
        return message[:limit]
    return message[: limit - len(_TRUNCATION_SUFFIX)] + _TRUNCATION_SUFFIX


class ToolExecutor:
    """The core of a tool call, shared by all instances of the agent."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        default_timeout_ms: int = DEFAULTS.agent.tool_timeout_ms,
        threads: int = DEFAULTS.agent.tool_threads,
        max_abandoned: int = DEFAULTS.agent.max_abandoned_threads,
    ) -> None:
        """`threads`: sync handlers at once (a timed-out one keeps its thread until it
        returns); `max_abandoned`: timed-out sync calls still running, past which sync tools
        wait."""
        self.registry = registry
        self.default_timeout_ms = default_timeout_ms
        self._pool: ThreadPoolExecutor | None = None
        self._threads = threads
        self._max_abandoned = max_abandoned
        # Tool name -> its timed-out calls whose threads still run (changed on the loop only).
        self.abandoned: dict[str, int] = {}
        self._log = structlog.get_logger()
        self._locks: dict[str, asyncio.Lock] = {}  # one per sequential tool, process-wide
        # Timeouts of the calls waiting on the loop now: one watchdog timer, not
        # `asyncio.timeout`'s timer and context objects per call.
        self._deadlines = Deadlines()
        self._runner: Runner | None = None  # an idle one, kept between calls

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def invoke(
        self,
        name: str,
        args: dict[str, Any],
        make_context: Callable[[], ToolContext],
        *,
        catalog: Collection[str],
        denied: Callable[[str], ToolResult | None] | None = None,
        allow_registry_calls: bool = False,
        submit: PendingSubmit | None = None,
    ) -> ToolResult:
        """Policy, catalog, lookup, validation, then the handler. `denied(name)` returns the
        error for a call the tool policy refuses, or None."""
        if denied is not None:
            refusal = denied(name)
            if refusal is not None:
                return refusal
        entry = self.registry.get(name)
        if name not in catalog and not (allow_registry_calls and entry is not None):
            return not_in_catalog(name, catalog)
        if entry is None:
            return ToolResult.fail(
                ToolErrorInfo(
                    code=ErrorCode.E_TOOL_NOT_FOUND,
                    name="ToolNotFoundError",
                    message=f"Tool '{name}' has no handler in this agent's Tool Registry.",
                    suggestion="Call one of the tools offered in this step.",
                )
            )
        try:
            entry.validate(args)
        except fastjsonschema.JsonSchemaValueException as exc:
            problem = _describe(entry.parameters, args, exc)
            return invalid_args(name, problem, entry.parameters, entry.error_message_limit)
        ctx = make_context()
        started = time.monotonic()
        try:
            if entry.is_async and not entry.sequential:
                # The handler's first stretch runs right here: until it waits on the loop no
                # deadline can pass, so most calls (which never wait) arm none, and a call
                # that waits is watched from `started` as before.
                runner = self._runner or _new_runner()
                self._runner = None  # in use: a first stretch may call tools too
                try:
                    signal = runner[0].send(entry.handler(ctx, args))
                except asyncio.CancelledError:
                    ctx._cancel()
                    raise
                if signal is not runner[1]:  # it waits
                    when = started + self._timeout_ms(entry) / 1000
                    await self._wait(runner, signal, ctx, when)
                output = runner[1].pop()
                self._runner = runner
            else:
                lock = self._lock(entry.name) if entry.sequential else None
                if lock is not None:
                    async with lock:
                        output = await self._run(entry, args, ctx, self._timeout_ms(entry))
                else:
                    output = await self._run(entry, args, ctx, self._timeout_ms(entry))
        except TimeoutError:
            timeout_ms = self._timeout_ms(entry)
            return ToolResult.fail(
                ToolErrorInfo(
                    code=ErrorCode.E_TOOL_TIMEOUT,
                    name="ToolTimeoutError",
                    message=f"Tool '{entry.name}' did not finish within {timeout_ms} ms.",
                    suggestion="Try a smaller piece of work, or raise the Tool's "
                    "spec.timeoutMs if it legitimately takes longer.",
                ),
                details={"timeoutMs": timeout_ms, "elapsedMs": _ms_since(started)},
            )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handler errors are data, never crashes
            return ToolResult.fail(error_info(exc, entry.error_message_limit))
        if type(output) not in _PLAIN and isinstance(output, _SHAPED):
            return shape_output(entry, output, submit)
        try:  # plain data, by far the most common, is shaped here
            _encoder.encode(output)  # the LLM reads JSON: refuse what cannot become JSON
        except (TypeError, ValueError, OverflowError) as exc:
            return _not_json(entry.name, exc)
        return ToolResult("ok", output)

    def _timeout_ms(self, entry: ToolEntry) -> int:
        return entry.timeout_ms or self.default_timeout_ms

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _wait(self, runner: Runner, signal: Any, ctx: ToolContext, when: float) -> None:
        """The rest of an async handler that waited on the loop (it yielded `signal`), under
        its deadline `when`; TimeoutError past it."""
        with self._deadline(ctx, when):
            await _resume(runner, signal)

    @contextlib.contextmanager
    def _deadline(self, ctx: ToolContext, when: float) -> Iterator[Deadline]:
        """The current task is cancelled at `when`, which the block sees as TimeoutError (a
        cancel from anyone else stays a cancel); `ctx.cancelled` is set either way."""
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        watched = self._deadlines.watch(task, when)
        try:
            yield watched
        except asyncio.CancelledError:
            ctx._cancel()
            if watched.expired and task.uncancel() <= cancelling:
                raise TimeoutError from None  # our deadline, and nobody else cancelled
            raise
        finally:
            self._deadlines.end(watched)

    async def _run(
        self, entry: ToolEntry, args: dict[str, Any], ctx: ToolContext, timeout_ms: int
    ) -> Any:
        """The handler's output; TimeoutError past `timeout_ms`."""
        with self._deadline(ctx, time.monotonic() + timeout_ms / 1000) as watched:
            if entry.is_async:
                return await entry.handler(ctx, args)
            self._check_threads(entry.name)
            # Sync handlers run off the loop so a slow one never blocks other instances. The
            # context (trace span) goes with it.
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="tool")
            call = contextvars.copy_context().run
            future = self._pool.submit(call, entry.handler, ctx, args)
            try:
                return await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                ctx._cancel()  # the thread runs on: `ctx.cancelled` tells the handler to stop
                self._abandon(entry.name, future, timeout_ms, timed_out=watched.expired)
                raise

    def _check_threads(self, name: str) -> None:
        """Refuse a sync call while its tool, or too many tools, have timed-out calls running."""
        if self.abandoned.get(name):
            raise ToolStillRunning(
                f"Tool '{name}' is refused: an earlier call timed out or was cancelled and is "
                "still running (a thread cannot be stopped)."
            )
        total = sum(self.abandoned.values())
        if total >= self._max_abandoned:
            stuck = ", ".join(sorted(self.abandoned))
            raise ToolStillRunning(
                f"Tool '{name}' is refused: {total} timed-out calls of sync tools ({stuck}) "
                "are still running in this agent's threads."
            )

    def _abandon(
        self,
        name: str,
        future: concurrent.futures.Future[Any],
        timeout_ms: int,
        *,
        timed_out: bool = True,
    ) -> None:
        """A timed-out or cancelled sync call runs on in its thread (its late result is
        dropped): count it until it returns."""
        if future.cancel():  # it had not started: nothing runs on
            return
        self.abandoned[name] = self.abandoned.get(name, 0) + 1
        self._log.warning(
            f"sync tool call {'timed out' if timed_out else 'cancelled'} and runs on in its "
            "thread; the tool is refused until it returns or the agent restarts",
            tool=name,
            timeoutMs=timeout_ms,
            abandonedThreads=sum(self.abandoned.values()),
        )
        loop = asyncio.get_running_loop()

        def returned() -> None:
            left = self.abandoned.get(name, 0) - 1
            if left > 0:
                self.abandoned[name] = left
            else:
                self.abandoned.pop(name, None)
            self._log.info("a timed-out sync tool call returned", tool=name)

        def done(_: concurrent.futures.Future[Any]) -> None:  # in the tool's thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: nothing to count
                loop.call_soon_threadsafe(returned)

        future.add_done_callback(done)


Runner = tuple[Generator[Any, Any, None], list[Any]]
"""A generator that runs the handler coroutines sent to it, and the list it yields when one
has returned, holding its result."""


def _new_runner() -> Runner:
    done: list[Any] = []
    runner = _run_handlers(done)
    runner.send(None)
    return runner, done


@types.coroutine
def _run_handlers(done: list[Any]) -> Generator[Any, Any, None]:
    """Kept between calls, runs each handler coroutine sent to it with `yield from`: exactly
    what `await` does, and unlike `coro.send` it learns the return value without a
    StopIteration. Until a handler returns, what it yields (it waits) comes out of `send`;
    its exception ends the runner."""
    coro = yield
    while True:
        done.append((yield from coro))
        coro = yield done


@types.coroutine
def _resume(runner: Runner, signal: Any) -> Generator[Any, Any, None]:
    """Drive `runner`, whose handler waits (it yielded `signal`), until the handler returns:
    what the task sends or throws in (a cancel) goes on to it, as with `await`."""
    gen, done = runner
    while signal is not done:
        try:
            sent = yield signal
        except GeneratorExit:
            gen.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - handed on, as `await` does
            signal = gen.throw(exc)
        else:
            signal = gen.send(sent)


def shape_output(entry: ToolEntry, output: Any, submit: PendingSubmit | None) -> ToolResult:
    """A handler's return value as a ToolResult: plain JSON data, a ToolResult, a Pending."""
    if isinstance(output, ToolResult):
        if output.error is not None:
            message = truncate_error_message(output.error.message, entry.error_message_limit)
            output = msgspec.structs.replace(
                output, error=msgspec.structs.replace(output.error, message=message)
            )
        return _json_checked(entry.name, output)
    if isinstance(output, Pending):
        if submit is None:
            return ToolResult.fail(
                ToolErrorInfo(
                    code=ErrorCode.E_TOOL_PENDING_UNSUPPORTED,
                    name="ToolPendingError",
                    message=f"Tool '{entry.name}' returned a Pending result, which cannot be "
                    "run in this context.",
                )
            )
        return submit(output, entry)
    return _json_checked(entry.name, ToolResult.ok(output))


_SHAPED = (ToolResult, Pending)  # handler results that are not plain data
# JSON's own types, never shaped: told by a set lookup, where `isinstance` against
# `ToolResult` goes through msgspec's metaclass (about as long as the JSON check itself).
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})


def _json_checked(name: str, result: ToolResult) -> ToolResult:
    try:
        _encoder.encode(result)  # the LLM reads JSON: refuse what cannot become JSON
    except (TypeError, ValueError, OverflowError) as exc:
        return _not_json(name, exc)
    return result


def _not_json(name: str, exc: Exception) -> ToolResult:
    return ToolResult.fail(
        ToolErrorInfo(
            code=ErrorCode.E_TOOL_BAD_OUTPUT,
            name=type(exc).__name__,
            message=f"Tool '{name}' returned a value that is not JSON: {exc}",
        )
    )


async def execute_tool_call(
    registry: ToolRegistry,
    catalog: Collection[str],
    call: ToolCall,
    make_context: Callable[[ToolCall], ToolContext],
) -> ToolResult:
    """One call, start to end, without middleware or a turn (for testing tools by themselves);
    the loop keeps one `ToolExecutor` per agent instead."""
    try:
        args = parse_arguments(call.arguments)
    except ArgumentsError as exc:
        return invalid_args(call.name, str(exc))
    executor = ToolExecutor(registry)
    try:
        return await executor.invoke(call.name, args, lambda: make_context(call), catalog=catalog)
    finally:
        executor.close()  # its thread pool, if a sync handler needed one


def not_in_catalog(name: str, catalog: Collection[str]) -> ToolResult:
    offered = ", ".join(sorted(catalog)) or "none"
    return ToolResult.fail(
        ToolErrorInfo(
            code=ErrorCode.E_TOOL_NOT_IN_CATALOG,
            name="ToolNotInCatalogError",
            message=f"Tool '{name}' is not available in the current Tool Catalog.",
            suggestion=f"Call one of the tools offered in this step: {offered}. (An operator "
            "adds tools through the Agent's spec.tools or an extension.)",
        )
    )


def invalid_args(
    name: str,
    problem: str,
    schema: dict[str, Any] | None = None,
    limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
) -> ToolResult:
    suggestion = "Fix the arguments to match the tool's parameters and call it again."
    if schema is not None:
        required = schema.get("required", [])
        allowed = list(schema.get("properties", {}))
        suggestion += f" required={required}, allowed={allowed}"
    return ToolResult.fail(
        ToolErrorInfo(
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            name="ToolInputValidationError",
            message=truncate_error_message(
                f"Invalid arguments for tool '{name}': {problem}", limit
            ),
            suggestion=suggestion,
        )
    )


def _describe(
    schema: dict[str, Any], args: dict[str, Any], exc: fastjsonschema.JsonSchemaValueException
) -> str:
    found = problems(schema, args)
    if not found:  # a keyword our walk does not know: the compiled validator's own words
        return str(exc.message).replace("data", "args", 1)
    return summarize(found)


def error_info(exc: BaseException, limit: int) -> ToolErrorInfo:
    message = str(exc) or "Unknown tool execution error"
    code = getattr(exc, "code", None)
    return ToolErrorInfo(
        code=code if isinstance(code, str) and code else ErrorCode.E_TOOL,
        name=type(exc).__name__,
        message=truncate_error_message(message, limit),
        suggestion=_str_or_none(getattr(exc, "suggestion", None)),
        help_url=_str_or_none(getattr(exc, "help_url", None)),
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
