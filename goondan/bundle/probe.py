"""Deep validation: import a bundle's Python entries in a throwaway process and check them.

`load_bundle` checks that entry files exist; only importing them finds a SyntaxError, an
import that fails, a Tool export with no handler, an Extension without `register` or a
Connector without `main`, which otherwise surface as `E_AGENT_START` on the first request.
User code may have side effects or hang at import, so it runs in one child process
(`goondan.bundle._probe_child`) in its own session, killed with its children when the time
limit is up; never in the validating process.

    problems = probe_entries(bundle, timeout_s=10.0)   # ConfigErrors, severity error/warning
    problems = await probe_entries_async(bundle, 10.0, resources)   # on an event loop
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from goondan.bundle.bundle import Bundle
from goondan.bundle.errors import ConfigError
from goondan.bundle.located import display_path
from goondan.bundle.model import LOCAL_SCOPE, ConnectionSpec, Resource, ToolSpec
from goondan.settings import DEFAULTS
from ipc.error_codes import ErrorCode

DEFAULT_TIMEOUT_S = DEFAULTS.daemon.import_timeout_s
ENTRY_KINDS = ("Tool", "Extension", "Connector")
_MODULE_PREFIX = {
    "Tool": "goondan_tool",
    "Extension": "goondan_ext",
    "Connector": "goondan_connector",
}
_STDERR_TAIL = 2000  # of a probe process that died: enough for its last error lines
_LINE_LIMIT = 1024 * 1024  # one event line; the child cuts long messages well below it


def bundle_entries(bundle: Bundle) -> list[Resource]:
    """What `goondan validate` imports: every local Tool, Extension and Connector, and the
    packages' ones that local Agents and Connections use."""
    found: dict[tuple[str, str, str], Resource] = {}

    def add(resource: Resource) -> None:
        if resource.spec.entry is None:  # an MCP Tool: nothing to import (nor to start)
            return
        found.setdefault((resource.package, resource.kind, resource.name), resource)

    for resource in bundle.resources:
        if resource.package != LOCAL_SCOPE:
            continue
        if resource.kind in ENTRY_KINDS:
            add(resource)
        elif resource.kind == "Agent":
            for used in (*bundle.agent_tools(resource), *bundle.agent_extensions(resource)):
                add(used)
        elif resource.kind == "Connection":
            spec: ConnectionSpec = resource.spec
            add(bundle.resolve(spec.connector_ref, resource.package))
    return list(found.values())


class _Run(NamedTuple):
    """What one probe process did: its events, exit status, stderr's tail, and whether the
    time limit killed it."""

    events: list[dict[str, Any]]
    status: int | None
    stderr: bytes
    timed_out: bool


def probe_entries(
    bundle: Bundle,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    resources: list[Resource] | None = None,
) -> list[ConfigError]:
    """Import `resources` (default: `bundle_entries(bundle)`) in one child process and return
    what is wrong: errors, and warnings (`severity="warning"`) for handlers no export declares.
    Blocks for up to `timeout_s`; on an event loop, use `probe_entries_async`."""
    entries = bundle_entries(bundle) if resources is None else resources
    if not entries:
        return []
    return _verdict(entries, _run_child(_request(entries), timeout_s), timeout_s)


async def probe_entries_async(
    bundle: Bundle,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    resources: list[Resource] | None = None,
) -> list[ConfigError]:
    """`probe_entries` for an event loop: the child is an asyncio subprocess, and cancelling
    the caller (a daemon stopping mid-reload) kills it and what it started at once."""
    entries = bundle_entries(bundle) if resources is None else resources
    if not entries:
        return []
    return _verdict(entries, await _run_child_async(_request(entries), timeout_s), timeout_s)


def _request(entries: list[Resource]) -> bytes:
    request = [
        {
            "path": str(r.entry_path()),
            "module": _module_name(r),
            "kind": r.kind,
            "root": str(r.source.root),
        }
        for r in entries
    ]
    return json.dumps(request).encode()


def _command(timeout_s: float) -> list[str]:
    return [sys.executable, "-B", "-m", "goondan.bundle._probe_child", f"{timeout_s:g}"]


def _verdict(entries: list[Resource], run: _Run, timeout_s: float) -> list[ConfigError]:
    results: dict[int, dict[str, Any]] = {}
    started: int | None = None
    done = False
    for event in run.events:
        if "start" in event:
            started = int(event["start"])
        elif "i" in event:
            results[int(event["i"])] = event
        elif event.get("done"):
            done = True
    problems: list[ConfigError] = []
    for index, resource in enumerate(entries):
        if index in results:
            problems.extend(_check(resource, results[index]))
    if done:
        return problems
    culprit = entries[started] if started is not None and started not in results else None
    if run.timed_out:
        what = "the import" if culprit else "the import probe"
        problems.append(
            ConfigError(
                code=ErrorCode.E_CONFIG_ENTRY_TIMEOUT,
                message=f"{what} did not finish within {timeout_s:g} s",
                file=display_path(culprit.entry_path()) if culprit else None,
                path=culprit.label if culprit else None,
                suggestion="do slow work (network, large files) on first use, not at import",
            )
        )
        return problems
    tail = run.stderr.decode("utf-8", "replace").strip()[-_STDERR_TAIL:]
    problems.append(
        ConfigError(
            code=ErrorCode.E_CONFIG_ENTRY_IMPORT,
            message=(
                f"the import ended the probe process (exit status {run.status})"
                if culprit
                else f"the import probe exited with status {run.status}"
            )
            + (f": {tail}" if tail else ""),
            file=display_path(culprit.entry_path()) if culprit else None,
            path=culprit.label if culprit else None,
            suggestion="an entry must not exit the process at import",
        )
    )
    return problems


def _events(lines: list[bytes]) -> list[dict[str, Any]]:
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _run_child(request: bytes, timeout_s: float) -> _Run:
    # stderr goes to a file: a process that user code started inherits it, and a pipe would
    # make `communicate` wait for that process as well.
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            _command(timeout_s),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,  # its own process group: a timeout kills what it started
        )
        timed_out = False
        try:
            out, _ = proc.communicate(request, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            out, _ = proc.communicate()
        finally:
            _kill_group(proc.pid)  # anything user code left behind in the group
        err.seek(max(0, err.seek(0, os.SEEK_END) - _STDERR_TAIL))
        tail = err.read()
    return _Run(_events(out.splitlines()), proc.returncode, tail, timed_out)


async def _run_child_async(request: bytes, timeout_s: float) -> _Run:
    proc = await asyncio.create_subprocess_exec(
        *_command(timeout_s),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        limit=_LINE_LIMIT,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    lines: list[bytes] = []
    err = bytearray()

    async def read_events() -> None:
        async for line in stdout:
            lines.append(line)
            if line.startswith(b'{"done"'):
                return  # not EOF: a process user code started may hold the pipe open

    async def read_stderr() -> None:
        while chunk := await stderr.read(65536):
            err.extend(chunk)
            del err[:-_STDERR_TAIL]

    stderr_task = asyncio.ensure_future(read_stderr())
    timed_out = False
    try:
        with contextlib.suppress(ConnectionError):  # it died before reading its request
            proc.stdin.write(request)
            await proc.stdin.drain()
            proc.stdin.close()
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(read_events(), proc.wait())
        except TimeoutError:
            timed_out = True
    finally:
        _kill_group(proc.pid)  # on a timeout, a cancellation, and what user code left behind
        await asyncio.shield(proc.wait())
        stderr_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stderr_task
    return _Run(_events(lines), proc.returncode, bytes(err), timed_out)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _module_name(resource: Resource) -> str:
    """The module name the agent or connector process gives the entry."""
    safe = "".join(ch if ch.isalnum() else "_" for ch in resource.package)
    name = "".join(ch if ch.isalnum() else "_" for ch in resource.name)
    return f"{_MODULE_PREFIX[resource.kind]}__{safe}__{name}"


def _check(resource: Resource, facts: dict[str, Any]) -> list[ConfigError]:
    entry = display_path(resource.entry_path())
    error = facts.get("error")
    if isinstance(error, dict):
        return [_import_error(resource, entry, error)]

    def problem(code: ErrorCode, message: str, suggestion: str, **kw: Any) -> ConfigError:
        return ConfigError(
            code=code,
            message=message,
            file=entry,
            path=resource.label,
            suggestion=suggestion,
            **kw,
        )

    if resource.kind == "Extension" and not facts.get("register"):
        return [
            problem(
                ErrorCode.E_CONFIG_EXTENSION_NO_REGISTER,
                "defines no `register` function",
                "add `def register(api, config): ...`",
            )
        ]
    if resource.kind == "Connector" and facts.get("main") != "async":
        has = "a `main` that is not `async`" if facts.get("main") == "sync" else "no `main`"
        return [
            problem(
                ErrorCode.E_CONFIG_CONNECTOR_NO_MAIN,
                f"defines {has}",
                "add `async def main(ctx): ...`",
            )
        ]
    if resource.kind != "Tool":
        return []
    spec: ToolSpec = resource.spec
    declared = [export.name for export in spec.exports]
    handlers = facts.get("handlers")
    if not isinstance(handlers, list):
        got = facts.get("handlers_type", "nothing")
        return [
            problem(
                ErrorCode.E_CONFIG_HANDLER_MISSING,
                "must define `handlers`, a dict of export name to function (found "
                + ("no `handlers`)" if got == "NoneType" else f"a {got})"),
                f'add `handlers = {{"{declared[0]}": fn}}`' if declared else "add `handlers`",
            )
        ]
    problems = []
    for name in declared:
        if name not in handlers:
            problems.append(
                problem(
                    ErrorCode.E_CONFIG_HANDLER_MISSING,
                    f"export '{name}' has no handler"
                    + (" (its handler is not callable)" if name in facts["not_callable"] else ""),
                    f'add `"{name}": fn` to `handlers`',
                )
            )
    for name in [*handlers, *facts.get("not_callable", ())]:
        if name not in declared:
            problems.append(
                problem(
                    ErrorCode.E_CONFIG_HANDLER_UNDECLARED,
                    f"handler '{name}' is not a declared export: no model can call it",
                    f"declare it under {resource.label} spec.exports, or remove it",
                    severity="warning",
                )
            )
    return problems


def _import_error(resource: Resource, entry: str, error: dict[str, Any]) -> ConfigError:
    kind = str(error.get("type", "Exception"))
    syntax = kind in ("SyntaxError", "IndentationError", "TabError")
    file = error.get("file")
    shown = display_path(Path(file)) if isinstance(file, str) else entry
    line = error.get("line")
    what = "import failed" if shown == entry else f"importing {entry} failed"
    return ConfigError(
        code=ErrorCode.E_CONFIG_ENTRY_SYNTAX if syntax else ErrorCode.E_CONFIG_ENTRY_IMPORT,
        message=f"{what}: {kind}: {error.get('message', '')}",
        file=shown,
        line=line if isinstance(line, int) else None,
        path=resource.label,
        suggestion=None if syntax else "run the file with `python FILE` to see the whole traceback",
    )
