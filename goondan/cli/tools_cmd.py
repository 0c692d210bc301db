"""`goondan tools list --agent A [PATH]`: the tools an agent is given by its Tool resources.

Python Tools are listed from their declared exports (nothing is imported). MCP Tools are what
their servers answer: each server is started here, as the agent would start it (env files
applied, same command, cwd and values), asked for its tools, and stopped; one that cannot
start is reported with its stderr's tail. `goondan doctor` runs the same start (`check_mcp`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from goondan.bundle import Bundle, BundleInvalid, Resource, load_bundle
from goondan.bundle.model import LOCAL_SCOPE
from goondan.bundle.names import TOOL_SEPARATOR
from goondan.cli.doctor_report import Check, fail, ok
from goondan.envfiles import EnvFileError, EnvFiles, render_errors
from goondan.logs import configure_logging


@dataclass(frozen=True)
class Listed:
    name: str
    description: str
    source: dict[str, str] | str  # "config", or {type: mcp, name}


@dataclass(frozen=True)
class ServerReport:
    resource: Resource
    transport: str
    tools: list[Listed]
    error: str | None  # why it could not start, with its stderr's tail


async def start_servers(resources: list[Resource]) -> list[ServerReport]:
    """Start each MCP Tool's server (all at once), list its tools, stop it."""
    from agentproc.mcp_tools import McpTools
    from agentproc.tool_registry import ToolRegistry

    mcp = McpTools(ToolRegistry([]), resources)
    try:
        failed = await mcp.start()
        reports = []
        for server in mcp.servers:
            error = server.failure() if server in failed else None
            tools = [
                Listed(entry.name, entry.description, {"type": "mcp", "name": server.name})
                for entry in server.entries()
            ]
            reports.append(ServerReport(server.resource, server.kind, tools, error))
        return reports
    finally:
        await mcp.aclose()


def _python_tools(resource: Resource) -> list[Listed]:
    return [
        Listed(f"{resource.name}{TOOL_SEPARATOR}{e.name}", e.description, "config")
        for e in resource.spec.exports
    ]


def run_tools(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    configure_logging("error")  # the servers' start and stop are not news here; errors are
    try:
        EnvFiles(args.path, args.env_file or ()).load()
    except EnvFileError as exc:
        print(render_errors(exc.errors), file=sys.stderr)
        return 1
    try:
        bundle = load_bundle(args.path)
    except BundleInvalid as exc:
        print(f"goondan tools: the bundle does not validate:\n{exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"goondan tools: {args.path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    agent = bundle.local("Agent", args.agent)
    if agent is None:
        names = ", ".join(r.name for r in bundle.of_kind("Agent") if r.package == LOCAL_SCOPE)
        print(
            f"goondan tools: no Agent/{args.agent} in {args.path} (agents: {names or 'none'})",
            file=sys.stderr,
        )
        return 1
    resources = bundle.agent_tools(agent)
    reports = asyncio.run(start_servers([r for r in resources if r.spec.mcp is not None]))
    by_resource = {id(report.resource): report for report in reports}
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for resource in resources:
        report = by_resource.get(id(resource))
        if report is None:
            tools = _python_tools(resource)
        else:
            tools = report.tools
            if report.error is not None:
                problems.append(f"{resource.label}: {report.error}")
        for item in tools:
            rows.append({"name": item.name, "source": item.source, "description": item.description})
    if args.json:
        json.dump({"agent": agent.name, "tools": rows, "errors": problems}, out, indent=2)
        out.write("\n")
    else:
        width = max((len(row["name"]) for row in rows), default=0)
        for row in rows:
            source = row["source"]
            origin = f"mcp:{source['name']}" if isinstance(source, dict) else source
            summary = (row["description"] or "").strip().splitlines()
            out.write(f"{row['name']:<{width}}  {origin:<12}  {summary[0] if summary else ''}\n")
        if not rows:
            out.write(f"Agent/{agent.name} has no tools from its Tool resources\n")
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def check_mcp(bundle: Bundle) -> list[Check]:
    """`goondan doctor`: start every MCP server the bundle's agents use, and list its tools."""
    used: dict[tuple[str, str], Resource] = {}
    for agent in bundle.of_kind("Agent"):
        if agent.package != LOCAL_SCOPE:
            continue
        for resource in bundle.agent_tools(agent):
            if resource.spec.mcp is not None:
                used.setdefault((resource.package, resource.name), resource)
    if not used:
        return []
    configure_logging("error")
    checks = []
    for report in asyncio.run(start_servers(list(used.values()))):
        label = report.resource.label
        if report.error is not None:
            checks.append(
                fail(
                    "mcp",
                    report.error.replace("\n", " | "),
                    f"fix {label} spec.mcp, or try the command by hand; "
                    f"`goondan tools list --agent AGENT` shows the same",
                )
            )
            continue
        names = ", ".join(t.name for t in report.tools) or "no tools"
        checks.append(
            ok("mcp", f"{label} ({report.transport}): {len(report.tools)} tools: {names}")
        )
    return checks
