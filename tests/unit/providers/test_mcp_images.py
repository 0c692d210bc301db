"""An MCP tool's image: described in the text every provider sends, and sent as an image by
the provider whose tool results take images (Anthropic)."""

from __future__ import annotations

import json
from pathlib import Path

from agentproc.mcp_tools import McpTools
from agentproc.messages import Message, ToolCall
from agentproc.providers.anthropic import wire_messages
from agentproc.providers.openai import _wire_message
from agentproc.tool_calls import result_message
from agentproc.tool_registry import ToolRegistry
from goondan.bundle.model import LOCAL_SCOPE, McpServerSpec, Metadata, Resource, Source, ToolSpec

REPO = Path(__file__).resolve().parents[3]


async def test_an_mcp_image_reaches_anthropic_as_an_image_and_others_as_text():
    resource = Resource(
        kind="Tool",
        metadata=Metadata("fake"),
        spec=ToolSpec(
            entry=None,
            exports=(),
            mcp=McpServerSpec(
                command=("python", str(REPO / "tests/fakes/mcp_server.py")),
                startup_timeout_ms=60_000,  # importing the SDK is slow on a busy machine
            ),
        ),
        package=LOCAL_SCOPE,
        source=Source(file=REPO / "goondan.yaml", line=1, doc_index=0, root=REPO),
    )
    registry = ToolRegistry([])
    mcp = McpTools(registry, [resource])
    try:
        await mcp.start()
        entry = registry.get("fake__picture")
        assert entry is not None
        result = await entry.handler(None, {})
    finally:
        await mcp.aclose()
    call = ToolCall("t1", "fake__picture", "{}")
    message = result_message("r1", call, result)
    text = json.loads(message.content or "")
    assert text["status"] == "ok"
    assert text["output"].startswith("[image: image/png, about ")  # what every model reads
    [image] = message.metadata["media"]
    assert image["mimeType"] == "image/png" and image["data"]

    _, wire = wire_messages(
        [
            Message(id="u", role="user", content="draw"),
            Message(id="a", role="assistant", tool_calls=(call,)),
            message,
        ]
    )
    [block] = wire[-1]["content"]
    assert block["type"] == "tool_result"
    assert block["content"][0] == {"type": "text", "text": message.content}
    assert block["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": image["data"]},
    }
    # OpenAI's tool messages carry text only: the description, not the data.
    assert _wire_message(message)["content"] == message.content
