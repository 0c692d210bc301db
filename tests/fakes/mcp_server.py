"""A real MCP server for the tests, written with the official SDK's server API (MCPServer, the
SDK's FastMCP). `python -m tests.fakes.mcp_server` serves stdio; `--http PORT` serves
streamable HTTP on 127.0.0.1. Its tools cover what the client must handle: text and
structured results, isError, a crash mid-call, a slow call, a list that changes, images.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("fake")
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers."""
    return {"sum": a + b}


@server.tool(name="echo.text", structured_output=False)
def echo_text(text: str) -> str:
    """Echo the text back (a name with a dot, which goondan maps)."""
    return text


@server.tool()
def refuse(why: str) -> str:
    """Always reports an error (isError)."""
    raise ToolError(f"refused: {why}")


@server.tool()
def crash() -> str:
    """Writes to stderr, then exits mid-call."""
    print("fake server: about to crash", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool(structured_output=False)
async def slow(seconds: float) -> str:
    """Sleeps, then answers."""
    await asyncio.sleep(seconds)
    return "slept"


_arrived = 0
_together = asyncio.Event()


@server.tool(structured_output=False)
async def meet() -> str:
    """Answers once two calls are running at the same time (proof of parallel calls)."""
    global _arrived
    _arrived += 1
    if _arrived >= 2:
        _together.set()
    try:
        await asyncio.wait_for(_together.wait(), 20)
    except TimeoutError:
        raise ToolError("no other call arrived while this one ran") from None
    return "met"


@server.tool()
def pid() -> dict[str, int]:
    """The server's process id (for the orphan tests)."""
    return {"pid": os.getpid(), "ppid": os.getppid()}


@server.tool(structured_output=False)
def whoami(ctx: Context) -> str:
    """The Authorization header of an HTTP request, or the TOKEN variable over stdio."""
    headers = ctx.headers or {}
    return headers.get("authorization") or os.environ.get("TOKEN", "")


@server.tool(structured_output=False)
async def grow(ctx: Context) -> str:
    """Adds the tool `late` and says the list changed."""

    @server.tool(name="late", structured_output=False)
    def late() -> str:
        return "late tool"

    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
def picture() -> Image:
    """A 1x1 PNG."""
    return Image(data=PNG, format="png")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()
    # A server slow to exit once its stdin closed: only the parent-death signal stops it.
    time.sleep(float(os.environ.get("FAKE_MCP_LINGER", "0")))


if __name__ == "__main__":
    main()
