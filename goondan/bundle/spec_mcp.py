"""`Tool.spec.mcp`: an MCP server as the source of a Tool's exports.

Only the declaration is checked here: `goondan validate` never starts a server nor reads the
environment (the agent process does both, see `agentproc/mcp_tools.py`).
"""

from __future__ import annotations

import os
from typing import Any

from goondan.bundle import codes
from goondan.bundle.fields import Checker
from goondan.bundle.located import YPath, display_path
from goondan.bundle.model import McpServerSpec, ValueSource
from goondan.bundle.spec_agents import SPEC

MCP = (*SPEC, "mcp")
DEFAULT_STARTUP_TIMEOUT_MS = 10_000
_FIELDS = ("command", "url", "env", "headers", "cwd", "startupTimeoutMs")


def parse_mcp(chk: Checker, value: Any) -> McpServerSpec | None:
    data = chk.mapping(MCP, value, _FIELDS)
    if data is None:
        return None
    mark = chk.mark()
    has_command = data.get("command") is not None
    has_url = data.get("url") is not None
    if has_command == has_url:
        chk.error(
            MCP,
            "set exactly one of 'command' (a stdio server) and 'url' (a streamable HTTP server)"
            + (", not both" if has_command else ""),
            "write command: [python, -m, mcp_server_time] or url: https://host/mcp",
        )
    command: tuple[str, ...] = ()
    if has_command:
        command = _command(chk, data["command"])
    url = None
    if has_url:
        url = chk.string((*MCP, "url"), data["url"], what="an http(s) URL")
        if url is not None and not url.startswith(("http://", "https://")):
            chk.error((*MCP, "url"), f"'{url}' is not an http:// or https:// URL")
    env = _values(chk, data, "env", allowed=has_command or not has_url, needs="command")
    headers = _values(chk, data, "headers", allowed=has_url or not has_command, needs="url")
    cwd = chk.optional_string(data, MCP, "cwd")
    if cwd is not None:
        if has_url:
            chk.error((*MCP, "cwd"), "'cwd' applies to a stdio server ('command') only")
        else:
            _check_dir(chk, (*MCP, "cwd"), cwd)
    startup = DEFAULT_STARTUP_TIMEOUT_MS
    if data.get("startupTimeoutMs") is not None:
        startup = chk.integer((*MCP, "startupTimeoutMs"), data["startupTimeoutMs"], minimum=1) or 0
    if not chk.clean_since(mark):
        return None
    return McpServerSpec(
        command=command,
        url=url,
        env=env,
        headers=headers,
        cwd=cwd,
        startup_timeout_ms=startup,
    )


def parse_filters(
    chk: Checker, data: dict[str, Any]
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """`include` / `exclude`: lists of the server's tool names (globs allowed)."""
    include = None
    if data.get("include") is not None:
        include = _names(chk, (*SPEC, "include"), data["include"])
    exclude: tuple[str, ...] = ()
    if data.get("exclude") is not None:
        exclude = _names(chk, (*SPEC, "exclude"), data["exclude"])
    return include, exclude


def _names(chk: Checker, path: YPath, value: Any) -> tuple[str, ...]:
    items = chk.sequence(path, value) or []
    return tuple(name for i, item in enumerate(items) if (name := chk.string((*path, i), item)))


def _command(chk: Checker, value: Any) -> tuple[str, ...]:
    path = (*MCP, "command")
    if isinstance(value, str):
        chk.error(
            path,
            "must be a list of words (the server's argv), got a string",
            f"write it as a list, e.g. [{', '.join(value.split()) or 'python, server.py'}]",
        )
        return ()
    items = chk.sequence(path, value, min_items=1) or []
    words = [chk.string((*path, i), item) for i, item in enumerate(items)]
    return tuple(w for w in words if w is not None)


def _values(
    chk: Checker, data: dict[str, Any], key: str, *, allowed: bool, needs: str
) -> dict[str, ValueSource]:
    if data.get(key) is None:
        return {}
    path = (*MCP, key)
    if not allowed:
        chk.error(path, f"'{key}' applies to a server declared with '{needs}' only")
        return {}
    mapping = chk.mapping(path, data[key], (), open_keys=True) or {}
    out: dict[str, ValueSource] = {}
    for name, item in mapping.items():
        source = chk.value_source((*path, str(name)), item)
        if source is not None:
            out[str(name)] = source
    return out


def _check_dir(chk: Checker, path: YPath, rel: str) -> None:
    """`cwd`: a directory inside the resource's root."""
    root = chk.root
    norm = os.path.normpath(rel)
    if os.path.isabs(rel) or rel.startswith("~") or norm == ".." or norm.startswith(".." + os.sep):
        chk.error(
            path,
            f"cwd '{rel}' must be a path inside the bundle root ({display_path(root)})",
            "write it like './servers'",
            codes.PATH_OUTSIDE_BUNDLE,
        )
        return
    target = root / norm
    if not target.resolve().is_relative_to(root.resolve()):
        chk.error(
            path,
            f"cwd '{rel}' is a symlink to {target.resolve()}, outside the bundle root",
            "keep the server's directory inside the bundle",
            codes.PATH_OUTSIDE_BUNDLE,
        )
    elif not target.is_dir():
        chk.error(
            path,
            f"cwd '{rel}' is not a directory (looked for {display_path(target)})",
            "create it, or fix the path (relative to the bundle root)",
            codes.ENTRY_NOT_FOUND,
        )
