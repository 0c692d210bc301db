"""Tool calls waiting for a human: the orchestrator's registry of approvals.

An agent asks (`approval_request`) when a call to a tool in `toolPolicy.requireApproval` is
about to run; `goondan approve` / `deny` decide, and the decision goes to the agent
(`approval_decision`). A call nobody decides within its timeout expires. Every change is
appended to `run/approvals.jsonl` before it is acted on, so a waiting call survives a daemon
restart: the redelivered turn asks again under the same id and finds the entry, pending or
already decided. Decided entries are kept for a day, for a turn that comes back later.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from goondan.files import replace_file
from goondan.paths import StorageError
from ipc import wire
from ipc.error_codes import ErrorCode
from orchestrator.control import CommandError

_KEEP_DECIDED_S = 86400.0


class Approval(msgspec.Struct, omit_defaults=True):
    id: str
    agent: str
    instance_key: str
    tool: str
    args: str
    tool_call_id: str
    created_at: float
    expires_at: float
    trace_id: str = ""
    decision: str = ""  # "" while waiting; approved / denied / expired / withdrawn
    reason: str = ""
    decided_by: str = ""
    decided_at: float = 0.0

    def decided(self) -> wire.ApprovalDecision:
        return wire.ApprovalDecision(
            self.id,
            self.decision,  # type: ignore[arg-type]  # one of the three once decided
            self.reason,
            self.decided_by,
            self.decided_at,
        )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Approval)
_args_decoder = msgspec.json.Decoder()


class ApprovalRegistry:
    def __init__(self, path: Path, send: Callable[[str, bytes], bool]) -> None:
        self.path = path
        self._send = send  # (agent, frame) -> False when the agent is not there
        self._entries: dict[str, Approval] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._log = structlog.get_logger()

    def recover(self) -> int:
        """Load the entries of earlier runs; returns how many still wait."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        for line in data.split(b"\n"):
            if line.strip():
                with contextlib.suppress(msgspec.DecodeError):  # a torn line
                    entry = _decoder.decode(line)
                    self._entries[entry.id] = entry
        now = time.time()
        for key, entry in list(self._entries.items()):
            if entry.decision and now - entry.decided_at > _KEEP_DECIDED_S:
                del self._entries[key]
        with contextlib.suppress(StorageError):  # the file as it is holds every entry
            self._rewrite()
        waiting = [e for e in self._entries.values() if not e.decision]
        for entry in waiting:
            self._arm(entry)
        return len(waiting)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    # -- from agents ---------------------------------------------------------------------------

    def request(self, agent: str, req: wire.ApprovalRequest) -> None:
        entry = self._entries.get(req.id)
        if req.withdrawn:
            if entry is not None and entry.agent == agent and not entry.decision:
                self._settle(entry, "withdrawn", "the turn stopped waiting", agent)
            return
        if entry is not None and entry.agent == agent and entry.decision != "withdrawn":
            if entry.decision:
                self._tell(entry)  # decided while the turn was away (a restart)
            return
        now = time.time()
        entry = Approval(
            req.id,
            agent,
            req.instance_key,
            req.tool,
            req.args,
            req.tool_call_id,
            now,
            now + req.timeout_s,
            trace_id=req.trace_id,
        )
        try:
            self._append(entry)
        except StorageError as exc:  # not durable: it still waits, for this run only
            self._log.warning("could not journal an approval", error=str(exc))
        self._entries[entry.id] = entry
        self._arm(entry)
        self._log.info("tool call waits for approval", id=entry.id, agent=agent, tool=req.tool)

    # -- from the CLI --------------------------------------------------------------------------

    def waiting(self) -> wire.Approvals:
        rows = [
            wire.ApprovalInfo(
                e.id, e.agent, e.instance_key, e.tool, _args(e.args), e.created_at, e.expires_at
            )
            for e in self._entries.values()
            if not e.decision
        ]
        return wire.Approvals(rows)

    def decide(self, decision: str, args: wire.DecideArgs) -> wire.Decided:
        entry = self._entries.get(args.id)
        if entry is None or entry.decision:
            state = "unknown" if entry is None else f"already {entry.decision}"
            raise CommandError(
                ErrorCode.E_APPROVAL_NOT_FOUND,
                f"no waiting approval '{args.id}' ({state}); see `goondan approvals`",
            )
        self._settle(entry, decision, args.reason, args.by or "unknown")
        return wire.Decided(
            entry.id, entry.decision, entry.decided_by, entry.decided_at, entry.reason
        )

    # -- helpers -------------------------------------------------------------------------------

    def _settle(self, entry: Approval, decision: str, reason: str, by: str) -> None:
        entry.decision, entry.reason = decision, reason
        entry.decided_by, entry.decided_at = by, time.time()
        timer = self._timers.pop(entry.id, None)
        if timer is not None:
            timer.cancel()
        try:
            self._append(entry)
        except StorageError as exc:
            self._log.warning("could not journal an approval's decision", error=str(exc))
        self._log.info("tool call approval decided", id=entry.id, decision=decision, decidedBy=by)
        if decision != "withdrawn":
            self._tell(entry)

    def _tell(self, entry: Approval) -> None:
        frame = wire.encode(wire.APPROVAL_DECISION, wire.ORCHESTRATOR, entry.agent, entry.decided())
        self._send(entry.agent, frame)  # an agent that is away asks again when it resumes

    def _arm(self, entry: Approval) -> None:
        delay = max(0.0, entry.expires_at - time.time())
        loop = asyncio.get_running_loop()
        self._timers[entry.id] = loop.call_later(delay, self._expire, entry.id)

    def _expire(self, approval_id: str) -> None:
        self._timers.pop(approval_id, None)
        entry = self._entries.get(approval_id)
        if entry is not None and not entry.decision:
            self._settle(entry, "expired", "nobody decided in time", "timeout")

    def _append(self, entry: Approval) -> None:
        line = _encoder.encode(entry) + b"\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError("the approvals journal", self.path, exc) from exc

    def _rewrite(self) -> None:
        lines = [_encoder.encode(entry) + b"\n" for entry in self._entries.values()]
        replace_file(self.path, b"".join(lines), durable=True, what="the approvals journal")


def with_decider(command: wire.Control, uid: int | None) -> wire.Control:
    """`approve` / `deny` as the daemon records them: decided by the login and uid the kernel
    reports for the CLI's connection (SO_PEERCRED), not by what the CLI says, when it can."""
    if uid is None or command.command not in ("approve", "deny"):
        return command
    try:
        args = wire.decode_args(command, wire.DecideArgs)
    except wire.BadArgs:
        return command  # the command answers it
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = "?"
    return wire.control(command.command, msgspec.structs.replace(args, by=f"{name} (uid {uid})"))


def _args(text: str) -> Any:
    try:
        return _args_decoder.decode(text)
    except msgspec.DecodeError:
        return text
