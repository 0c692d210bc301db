"""Tool jobs, the long-running tool calls (spec §12.4): a handler returns `Pending(work)`, the
LLM gets a `handle` at once (a result with status "pending"), and the completion reaches the
conversation later.

The work runs in the agent process, beside the turns. When it settles, its result (output or
structured error) is recorded on disk and delivered to the instance's inbox, so it joins the
conversation before the next step, or before the next turn when this one has ended. While
handles are open, the runtime tool `tool-jobs__poll` is in the catalog to ask about one.

Nothing is lost across a restart: `pending-tools.json` (in the instance's agent directory)
holds every job until its completion message is in the conversation. On load, a finished job
whose message never made it is delivered again, and a job that was still running when the
process stopped is answered with `E_TOOL_INTERRUPTED`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import msgspec
import structlog

from agentproc.counters import COUNTERS
from agentproc.messages import Message
from agentproc.tool_executor import error_info, shape_output
from agentproc.tool_registry import ToolEntry, make_entry
from agentproc.tracing import TurnTracer, new_span_id
from goondan.files import replace_file
from goondan.tools import Pending, ToolContext, ToolError, ToolErrorInfo, ToolResult
from ipc.error_codes import ErrorCode

PENDING_FILE = "pending-tools.json"
POLL_TOOL = "tool-jobs__poll"
COMPLETION_KEY = "__goondanToolCompletion"
_encoder = msgspec.json.Encoder()


class JobRecord(msgspec.Struct, omit_defaults=True, rename="camel"):
    handle: str
    tool_name: str
    tool_call_id: str
    submitted_at: float
    status: Literal["running", "ok", "error"]
    finished_at: float | None = None
    result: ToolResult | None = None
    span_id: str | None = None


_records_decoder = msgspec.json.Decoder(list[JobRecord])


class ToolJobs:
    """The tool jobs of one instance of the agent (`Instance.jobs`)."""

    def __init__(
        self, directory: Path, deliver: Callable[[Message], None], *, durable: bool = False
    ) -> None:
        """`durable`: the records are fsync'd before a save returns (`--durability fsync`)."""
        self._directory = directory
        self._durable = durable
        self._deliver = deliver
        self._records: dict[str, JobRecord] = {}
        self._tasks: dict[str, asyncio.Future[Any]] = {}

    @functools.cached_property
    def path(self) -> Path:
        """The records' file; made on first use (most instances never run a job)."""
        return self._directory / PENDING_FILE

    # -- life cycle ------------------------------------------------------------------------

    def load(self, messages: list[Message]) -> None:
        """Resume after a restart: deliver what finished, answer what was cut short."""
        try:
            records = _records_decoder.decode(self.path.read_bytes())
        except FileNotFoundError:
            return
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            structlog.get_logger().warning(
                "unreadable pending-tools file ignored", path=str(self.path), error=str(exc)
            )
            return
        delivered = delivered_handles(messages)
        for record in records:
            if record.handle in delivered:
                continue
            if record.status == "running":
                record.status = "error"
                record.finished_at = time.time()
                record.result = ToolResult.fail(
                    ToolErrorInfo(
                        code=ErrorCode.E_TOOL_INTERRUPTED,
                        name="ToolInterruptedError",
                        message=f"The agent process stopped before '{record.tool_name}' "
                        f"(handle {record.handle}) finished.",
                        suggestion="Start the work again if it is still needed.",
                    )
                )
            self._records[record.handle] = record
            self._deliver(completion_message(record))
        self._save()

    def cancel_all(self) -> None:
        for task in self._tasks.values():
            task.cancel()

    # -- jobs --------------------------------------------------------------------------------

    def submit(
        self,
        pending: Pending,
        entry: ToolEntry,
        tool_call_id: str,
        tracer: TurnTracer | None = None,
        span_id: str | None = None,
    ) -> ToolResult:
        handle = pending.handle or f"job-{secrets.token_hex(6)}"
        if handle in self._records and self._records[handle].status == "running":
            pending_close(pending.work)
            return ToolResult.fail(
                ToolErrorInfo(
                    code=ErrorCode.E_TOOL_PENDING_DUPLICATE,
                    name="ToolPendingError",
                    message=f"A job with handle '{handle}' is still running.",
                )
            )
        record = JobRecord(
            handle, entry.name, tool_call_id, time.time(), "running", span_id=span_id
        )
        self._records[handle] = record
        self._save()
        work = pending.work
        loop = asyncio.get_running_loop()
        task: asyncio.Future[Any]
        if inspect.isawaitable(work):
            task = asyncio.ensure_future(work)
        elif callable(work):
            task = loop.run_in_executor(None, work)
        else:
            return self._settle_now(record, "the Pending work is neither awaitable nor callable")
        self._tasks[handle] = task
        task.add_done_callback(lambda done: self._finished(record, entry, done, tracer))
        message = pending.message or (
            f"Submitted as job {handle}. The result will arrive as a message before a later "
            f"step; to check on it meanwhile, call {POLL_TOOL} with this handle."
        )
        return ToolResult.pending(handle, message, details=pending.details)

    def status(self, handle: str) -> dict[str, Any] | None:
        record = self._records.get(handle)
        if record is None:
            return None
        out: dict[str, Any] = {
            "handle": handle,
            "toolName": record.tool_name,
            "status": record.status,
            "elapsedMs": round(((record.finished_at or time.time()) - record.submitted_at) * 1000),
        }
        if record.result is not None:
            out.update(_body(record.result))
        return out

    def has_open(self) -> bool:
        return bool(self._records)

    def settle_delivered(self, messages: list[Message]) -> None:
        """Forget finished jobs whose completion is now in the conversation (at turn end)."""
        if not self._records or all(r.status == "running" for r in self._records.values()):
            return  # the common case: nothing to look for (and no scan of the conversation)
        done = delivered_handles(messages)
        gone = [h for h, r in self._records.items() if r.status != "running" and h in done]
        for handle in gone:
            del self._records[handle]
        if gone:
            self._save()

    def _finished(
        self,
        record: JobRecord,
        entry: ToolEntry,
        done: asyncio.Future[Any],
        tracer: TurnTracer | None,
    ) -> None:
        self._tasks.pop(record.handle, None)
        if done.cancelled():
            return  # the process is stopping: the record stays "running" -> interrupted on load
        exc = done.exception()
        if exc is not None:
            record.result = ToolResult.fail(error_info(exc, entry.error_message_limit))
        else:
            record.result = shape_output(entry, done.result(), None)
        record.status = "ok" if record.result.status == "ok" else "error"
        record.finished_at = time.time()
        self._save()
        COUNTERS.tool_call(record.tool_name, record.status)
        if tracer is not None:
            event = "tool.completed" if record.status == "ok" else "tool.failed"
            data: dict[str, Any] = {
                "toolCallId": record.tool_call_id,
                "toolName": record.tool_name,
                "handle": record.handle,
                "status": record.status,
                "async": True,
                "duration": round((record.finished_at - record.submitted_at) * 1000),
            }
            if record.result.error is not None:
                data["errorCode"] = record.result.error.code
                data["errorMessage"] = record.result.error.message
            tracer.emit(event, new_span_id(), record.span_id, data)
        self._deliver(completion_message(record))

    def _settle_now(self, record: JobRecord, problem: str) -> ToolResult:
        del self._records[record.handle]
        self._save()
        return ToolResult.fail(ToolErrorInfo(code=ErrorCode.E_TOOL_BAD_OUTPUT, message=problem))

    def _save(self) -> None:
        if not self._records:
            self.path.unlink(missing_ok=True)
            return
        records = _encoder.encode(list(self._records.values()))
        replace_file(self.path, records, durable=self._durable)


def completion_message(record: JobRecord) -> Message:
    result = record.result or ToolResult.fail(ToolErrorInfo(message="no result"))
    body = {
        "type": "tool_completion",
        "handle": record.handle,
        "toolName": record.tool_name,
        "toolCallId": record.tool_call_id,
        **_body(result),
    }
    return Message(
        id=f"job-{record.handle}-done",
        role="user",
        content=json.dumps(body, ensure_ascii=False),
        metadata={
            COMPLETION_KEY: {
                "handle": record.handle,
                "toolName": record.tool_name,
                "toolCallId": record.tool_call_id,
                "status": result.status,
            }
        },
    )


def delivered_handles(messages: list[Message]) -> set[str]:
    handles: set[str] = set()
    for message in messages:
        info = message.metadata.get(COMPLETION_KEY) if message.metadata else None
        if isinstance(info, dict) and isinstance(info.get("handle"), str):
            handles.add(info["handle"])
    return handles


current_jobs: ContextVar[ToolJobs | None] = ContextVar("goondan_tool_jobs", default=None)


@functools.cache
def poll_entry() -> ToolEntry:
    """The runtime tool `tool-jobs__poll`, offered while the instance has open jobs. Made once
    per process (agents inherit the template's): compiling its argument validator is
    milliseconds of an agent's start."""

    def poll(ctx: ToolContext, args: dict[str, Any]) -> Any:
        jobs = current_jobs.get()  # the turn's instance (the context follows into the thread)
        status = jobs.status(args["handle"]) if jobs is not None else None
        if status is None:
            raise ToolError(
                f"No job with handle '{args['handle']}' in this conversation.",
                code=ErrorCode.E_TOOL_JOB_NOT_FOUND,
                suggestion="Use the handle a pending tool result returned.",
            )
        return status

    return make_entry(
        POLL_TOOL,
        "Check on a long-running tool call by the handle its pending result gave. The "
        "result also arrives by itself as a message once the work is done.",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["handle"],
            "properties": {
                "handle": {"type": "string", "description": "The handle of the pending call."}
            },
        },
        poll,
        source="runtime",
    )


def pending_close(work: Any) -> None:
    """Close a coroutine that will never run (avoids 'never awaited' warnings)."""
    close = getattr(work, "close", None)
    if inspect.iscoroutine(work) and close is not None:
        close()


def _body(result: ToolResult) -> dict[str, Any]:
    body: dict[str, Any] = {"status": result.status}
    if result.error is not None:
        body["error"] = msgspec.to_builtins(result.error)
    else:
        body["output"] = result.output
    return body
