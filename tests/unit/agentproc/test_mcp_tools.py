"""MCP Tools against real MCP servers (written with the SDK's server API) over stdio and
streamable HTTP: calls through the Tool executor, errors, a crash mid-call, list_changed,
timeouts, filters, a server that cannot start, and the export naming rule."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog

from agentproc.catalog import CatalogBuilder, ToolPolicy
from agentproc.mcp_tools import (
    STDERR_KEEP_BYTES,
    McpServer,
    McpTools,
    export_names,
    stderr_file,
    to_result,
    trim_stderr,
)
from agentproc.tool_executor import ToolExecutor
from agentproc.tool_registry import ToolRegistry, check_tool_name
from goondan import ToolContext, ToolResult, ToolSource
from goondan.bundle.model import (
    LOCAL_SCOPE,
    McpServerSpec,
    Metadata,
    Resource,
    Source,
    ToolPolicySpec,
    ToolSpec,
    ValueSource,
)
from tests.waiting import until, wait_for

REPO = Path(__file__).resolve().parents[3]
SERVER = str(REPO / "tests" / "fakes" / "mcp_server.py")


def tool(name: str, root: Path = REPO, **spec: Any) -> Resource:
    server = {k: spec.pop(k) for k in list(spec) if k in McpServerSpec.__struct_fields__}
    server.setdefault("command", ("python", SERVER))
    server.setdefault("startup_timeout_ms", 60_000)  # importing the SDK is slow on a busy machine
    return Resource(
        kind="Tool",
        metadata=Metadata(name),
        spec=ToolSpec(entry=None, exports=(), mcp=McpServerSpec(**server), **spec),
        package=LOCAL_SCOPE,
        source=Source(file=root / "goondan.yaml", line=1, doc_index=0, root=root),
    )


def context() -> ToolContext:
    return ToolContext(
        agent_name="a",
        instance_key="k",
        turn_id="t",
        trace_id="tr",
        tool_call_id="c1",
        message=None,
        workdir=Path("/tmp"),
        logger=structlog.get_logger(),
        runtime=None,  # type: ignore[arg-type]  # MCP tools never reach the runtime
    )


class Agent:
    """A registry with MCP Tools and the executor an agent would call them with."""

    def __init__(self, *resources: Resource, policy: ToolPolicySpec | None = None) -> None:
        self.registry = ToolRegistry.from_resources(list(resources))
        self.mcp = McpTools(self.registry, list(resources))
        self.executor = ToolExecutor(self.registry)
        self.policy = ToolPolicy(policy or ToolPolicySpec())
        self.catalog = CatalogBuilder(self.registry, self.policy)

    async def call(self, name: str, args: dict[str, Any] | None = None) -> ToolResult:
        offered = [item.name for item in self.catalog.build()]
        return await self.executor.invoke(
            name, args or {}, context, catalog=offered, denied=self.policy.refusal
        )


@pytest.fixture
async def agent_of() -> AsyncIterator[Any]:
    made: list[Agent] = []

    async def make(*resources: Resource, **kw: Any) -> Agent:
        agent = Agent(*resources, **kw)
        made.append(agent)
        await agent.mcp.start()
        return agent

    yield make
    for agent in made:
        agent.executor.close()
        await agent.mcp.aclose()


def test_export_names_map_invalid_characters_predictably():
    names = export_names("srv", ["get.time", "a__b", "_x_", "a/b", "a-b", "日本", "ok"])
    assert names == {
        "get_time": "get.time",
        "a_b": "a__b",
        "x": "_x_",
        "a_b_2": "a/b",
        "a-b": "a-b",
        "tool": "日本",
        "ok": "ok",
    }
    long = "x" * 80
    [(export, original)] = export_names("srv", [long]).items()
    assert original == long and len(f"srv__{export}") == 64
    assert check_tool_name(f"srv__{export}") is None
    assert export_names("srv", [long]) == {export: long}  # the same every time


async def test_stdio_tools_become_registry_entries_and_answer(agent_of):
    agent = await agent_of(tool("fake"))
    items = {item.name: item for item in agent.catalog.build()}
    assert {"fake__add", "fake__echo_text", "fake__refuse", "fake__crash"} <= set(items)
    add = items["fake__add"]
    assert add.source == ToolSource(type="mcp", name="fake")
    wire = msgspec.json.decode(msgspec.json.encode(add))
    assert wire["source"] == {"type": "mcp", "name": "fake"}
    assert add.parameters["required"] == ["a", "b"]
    assert add.description == "Add two numbers."
    # structuredContent is preferred; plain text otherwise (the server's name had a dot).
    assert (await agent.call("fake__add", {"a": 2, "b": 40})).output == {"sum": 42}
    assert (await agent.call("fake__echo_text", {"text": "hi"})).output == "hi"


async def test_calls_of_one_response_run_in_parallel_on_one_server(agent_of):
    agent = await agent_of(tool("fake"))
    first, second = await asyncio.gather(agent.call("fake__meet"), agent.call("fake__meet"))
    assert (first.output, second.output) == ("met", "met")


async def test_is_error_becomes_e_tool_mcp(agent_of):
    agent = await agent_of(tool("fake"))
    result = await agent.call("fake__refuse", {"why": "no reason"})
    assert result.status == "error" and result.error is not None
    assert result.error.code == "E_TOOL_MCP"
    assert "refused: no reason" in result.error.message


async def test_arguments_are_checked_against_the_input_schema(agent_of):
    agent = await agent_of(tool("fake"))
    result = await agent.call("fake__add", {"a": "two"})
    assert result.error is not None and result.error.code == "E_TOOL_INVALID_ARGS"


async def test_policy_and_filters_apply(agent_of):
    agent = await agent_of(
        tool("fake", include=("add", "echo*", "refuse"), exclude=("echo.text",)),
        policy=ToolPolicySpec(deny=("fake__refuse",)),
    )
    assert sorted(agent.registry.names()) == ["fake__add", "fake__refuse"]
    assert [i.name for i in agent.catalog.build()] == ["fake__add"]
    result = await agent.call("fake__refuse", {"why": "x"})
    assert result.error is not None and result.error.code == "E_TOOL_POLICY_DENIED"


async def test_a_crash_mid_call_is_a_tool_error_with_stderr_then_a_restart(agent_of):
    agent = await agent_of(tool("fake"))
    before = (await agent.call("fake__pid")).output["pid"]
    result = await agent.call("fake__crash")
    assert result.error is not None and result.error.code == "E_TOOL_MCP"
    assert "MCP server 'fake'" in result.error.message
    assert "died during the call to 'crash'" in result.error.message
    assert "fake server: about to crash" in result.error.message  # its stderr's tail
    # Restarted with back-off; a call soon after waits for the new server.
    again = await agent.call("fake__pid")
    assert again.status == "ok", again
    assert again.output["pid"] != before
    assert agent.mcp.servers[0].starts == 2


async def test_a_call_over_its_timeout_fails_and_the_server_goes_on(agent_of):
    agent = await agent_of(tool("fake", timeout_ms=300))
    started = time.monotonic()
    result = await agent.call("fake__slow", {"seconds": 30})
    assert time.monotonic() - started < 20
    assert result.error is not None and result.error.code == "E_TOOL_TIMEOUT"
    assert (await agent.call("fake__add", {"a": 1, "b": 1})).output == {"sum": 2}


async def test_list_changed_refreshes_the_catalog(agent_of):
    agent = await agent_of(tool("fake"))
    version = agent.registry.version
    assert "fake__late" not in agent.registry.names()
    assert (await agent.call("fake__grow")).output == "grown"
    # What the turn does before its next step.
    await until(lambda: agent.registry.refreshing or agent.registry.version > version)
    await agent.registry.settle()
    assert "fake__late" in [item.name for item in agent.catalog.build()]
    assert (await agent.call("fake__late")).output == "late tool"


async def test_a_server_that_cannot_start_is_a_tool_error_naming_it(agent_of, tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import sys\nprint('broken: no config file', file=sys.stderr)\nsys.exit(2)\n")
    agent = await agent_of(
        tool("broken", root=tmp_path, command=("python", "broken.py"), include=("lookup",))
    )
    [server] = agent.mcp.servers
    assert server.state in ("backoff", "starting")
    # Its `include`d name is offered, and says why it cannot run.
    result = await agent.call("broken__lookup")
    assert result.error is not None and result.error.code == "E_TOOL_MCP"
    assert "MCP server 'broken'" in result.error.message
    assert "broken: no config file" in result.error.message


async def test_a_missing_command_names_it(agent_of, tmp_path):
    agent = await agent_of(tool("gone", command=("no-such-mcp-server",), startup_timeout_ms=5000))
    [server] = agent.mcp.servers
    message = server.failure()
    assert "cannot run 'no-such-mcp-server'" in message


async def test_a_server_that_never_answers_is_bounded_by_the_startup_limit(agent_of, tmp_path):
    (tmp_path / "mute.py").write_text("import time\ntime.sleep(60)\n")
    started = time.monotonic()
    agent = await agent_of(
        tool("mute", root=tmp_path, command=("python", "mute.py"), startup_timeout_ms=500)
    )
    assert time.monotonic() - started < 15
    assert "startupTimeoutMs (500 ms)" in (agent.mcp.servers[0].last_error or "")


async def test_env_values_reach_a_stdio_server_and_cwd_is_used(agent_of, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MCP_TOKEN", "s3cret")
    (tmp_path / "servers").mkdir()
    agent = await agent_of(
        tool(
            "fake",
            root=tmp_path,
            command=("python", SERVER),
            env={"TOKEN": ValueSource(env="FAKE_MCP_TOKEN")},
            cwd="servers",
        )
    )
    assert (await agent.call("fake__whoami")).output == "s3cret"


def test_a_servers_stderr_file_stays_bounded():
    with stderr_file() as errlog:
        errlog.write("old line\n" * 200_000)
        errlog.write("the last words\n")
        errlog.flush()
        trim_stderr(errlog, limit=100_000)
        assert os.fstat(errlog.fileno()).st_size <= STDERR_KEEP_BYTES
        errlog.write("after the cut\n")  # appended at the new end
        errlog.flush()
        errlog.seek(0)
        assert errlog.read().endswith("the last words\nafter the cut\n")
        # Another descriptor of the same file (the server's) appends at the end too, even
        # after our reads moved the shared offset.
        errlog.seek(0)
        server_fd = os.dup(errlog.fileno())
        os.write(server_fd, b"from the server\n")
        os.close(server_fd)
        errlog.seek(0)
        assert errlog.read().endswith("after the cut\nfrom the server\n")


def test_images_are_described_in_text_and_kept_in_details():
    from mcp_types import CallToolResult, ImageContent, TextContent

    result = to_result(
        CallToolResult(
            content=[
                TextContent(text="a chart"),
                ImageContent(data="aGVsbG8=", mime_type="image/png"),
            ]
        )
    )
    assert result.output == "a chart\n[image: image/png, about 6 bytes]"
    assert result.details == {
        "media": [{"type": "image", "mimeType": "image/png", "data": "aGVsbG8="}]
    }


# -- streamable HTTP -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HttpServer:
    """The fake server over streamable HTTP on 127.0.0.1, in a process of its own."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tempfile.TemporaryFile()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, SERVER, "--http", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        proc = self.proc

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(lambda: proc.poll() is not None or listening(), 60)
        assert proc.poll() is None, self.log.seek(0) or self.log.read()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def http() -> Iterator[HttpServer]:
    server = HttpServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()
        server.log.close()


async def test_an_http_server_dying_mid_call_is_an_error_then_a_reconnect(agent_of, http):
    agent = await agent_of(tool("web", command=(), url=http.url))

    async def kill_soon() -> None:
        await asyncio.sleep(1)
        http.kill()

    killer = asyncio.ensure_future(kill_soon())
    result = await agent.call("web__slow", {"seconds": 60})
    await killer
    assert result.error is not None and result.error.code == "E_TOOL_MCP"
    assert (
        "MCP server 'web'" in result.error.message
        and "died during the call" in result.error.message
    )
    # The client reconnects with back-off, and gets the server back once it is up again.
    http.start()
    await until(lambda: agent.mcp.servers[0].state == "ready", 60)
    assert (await agent.call("web__add", {"a": 2, "b": 2})).output == {"sum": 4}


async def test_streamable_http_calls_with_headers(agent_of, http, monkeypatch):
    monkeypatch.setenv("FAKE_MCP_BEARER", "Bearer t0ken")
    agent = await agent_of(
        tool(
            "web",
            command=(),
            url=http.url,
            headers={"Authorization": ValueSource(env="FAKE_MCP_BEARER")},
        )
    )
    assert (await agent.call("web__add", {"a": 1, "b": 2})).output == {"sum": 3}
    assert (await agent.call("web__whoami")).output == "Bearer t0ken"
    result = await agent.call("web__refuse", {"why": "http"})
    assert result.error is not None and result.error.code == "E_TOOL_MCP"
    assert (await agent.call("web__grow")).output == "grown"
    await until(lambda: "web__late" in agent.registry.names())


async def test_an_http_server_that_is_not_there(agent_of):
    url = f"http://127.0.0.1:{free_port()}/mcp"
    agent = await agent_of(tool("web", command=(), url=url, include=("add",)))
    result = await agent.call("web__add", {"a": 1, "b": 2})
    assert result.error is not None and result.error.code == "E_TOOL_MCP"
    assert "MCP server 'web'" in result.error.message and url in result.error.message


async def test_a_missing_header_variable_is_named(agent_of, monkeypatch):
    monkeypatch.delenv("FAKE_MCP_UNSET", raising=False)
    agent = await agent_of(
        tool(
            "web",
            command=(),
            url="http://127.0.0.1:9/mcp",
            headers={"Authorization": ValueSource(env="FAKE_MCP_UNSET")},
        )
    )
    assert "environment variable FAKE_MCP_UNSET" in (agent.mcp.servers[0].last_error or "")


# -- no orphans ------------------------------------------------------------------------------

HOLDER = """
import asyncio, json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from goondan.bundle.model import ValueSource
from tests.unit.agentproc.test_mcp_tools import tool, Agent

async def main():
    agent = Agent(tool("fake", env={{"FAKE_MCP_LINGER": ValueSource(value="120")}}))
    await agent.mcp.start()
    result = await agent.call("fake__pid")
    print("PID " + json.dumps(result.output), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (its parent, init here, reaps it).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_stdio_server_dies_with_its_agent_under_sigkill(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(repo=str(REPO))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = ""
        while not line.startswith("PID "):  # past the log lines
            line = holder.stdout.readline()
            assert line, "the holder ended before it printed the server's pid"
        info = json.loads(line[4:])
        assert info["ppid"] == holder.pid  # a child of the agent, not of a shell
        assert alive(info["pid"])
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        wait_for(lambda: not alive(info["pid"]), 10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


async def test_closing_stops_the_server(agent_of):
    agent = await agent_of(tool("fake"))
    pid = (await agent.call("fake__pid")).output["pid"]
    await agent.mcp.aclose()
    await until(lambda: not alive(pid))
    result = await agent.call("fake__pid")
    assert result.error is not None and result.error.code == "E_TOOL_MCP"


def test_server_state_names_the_transport():
    assert McpServer(tool("a")).kind == "stdio"
    assert McpServer(tool("b", command=(), url="http://x/mcp")).kind == "http"
