"""The built-in `discord` connector: signed interactions over real HTTP (Ed25519 with a key pair
made here), PING, slash commands, components, and the deferred reply edited in afterwards."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.fakes.fake_orchestrator import (
    FakeOrchestrator,
    free_port,
    wait_listening,
    write_bundle,
)

pytestmark = pytest.mark.timeout(30)

KEY = Ed25519PrivateKey.generate()
PUBLIC_HEX = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

CONNECTIONS = """
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: dc
spec:
  connectorRef: {kind: Connector, name: discord, package: "@goondan/base"}
  config:
    PORT: {valueFrom: {env: DC_PORT}}
    ACK_TEXT: {value: "On it."}
  secrets:
    DISCORD_PUBLIC_KEY: {valueFrom: {env: DC_KEY}}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: dc-reply
spec:
  connectorRef: {kind: Connector, name: discord, package: "@goondan/base"}
  config:
    PORT: {valueFrom: {env: DC_REPLY_PORT}}
    REPLY: {value: "true"}
    DISCORD_API_BASE_URL: {valueFrom: {env: DC_API}}
  secrets:
    DISCORD_PUBLIC_KEY: {valueFrom: {env: DC_KEY}}
"""

COMMAND = {
    "type": 2,
    "id": "111",
    "application_id": "999",
    "token": "interaction-token-abc",
    "channel_id": "C77",
    "guild_id": "G1",
    "member": {"user": {"id": "U5", "username": "bob"}},
    "data": {
        "name": "ask",
        "options": [
            {"name": "question", "type": 3, "value": "why?"},
            {"name": "loud", "type": 5, "value": True},
        ],
    },
}


def signed(body: bytes, key: Ed25519PrivateKey = KEY) -> dict[str, str]:
    ts = str(int(time.time()))
    signature = key.sign(ts.encode() + body).hex()
    return {
        "X-Signature-Ed25519": signature,
        "X-Signature-Timestamp": ts,
        "Content-Type": "application/json",
    }


async def _discord_api(edits: list[tuple[str, dict[str, Any]]]) -> tuple[web.AppRunner, str]:
    async def edit(request: web.Request) -> web.Response:
        edits.append((request.path, await request.json()))
        return web.json_response({"id": "m1"})

    app = web.Application()
    app.router.add_patch("/api/v10/webhooks/{app}/{token}/messages/@original", edit)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}/api/v10"


async def test_discord_ping_signatures_commands_and_components() -> None:
    edits: list[tuple[str, dict[str, Any]]] = []
    runner, api_url = await _discord_api(edits)
    try:
        async with FakeOrchestrator() as orch:
            port, reply_port = free_port(), free_port()
            write_bundle(orch.dir / "b", CONNECTIONS)
            env = {
                "DC_PORT": str(port),
                "DC_REPLY_PORT": str(reply_port),
                "DC_KEY": PUBLIC_HEX,
                "DC_API": api_url,
            }
            proc = await orch.spawn("dc", orch.dir / "b", env)
            reply_proc = await orch.spawn("dc-reply", orch.dir / "b", env)
            url, reply_url = f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{reply_port}/"
            await wait_listening(url, proc)
            await wait_listening(reply_url, reply_proc)
            async with httpx.AsyncClient(timeout=10) as client:
                ping = json.dumps({"type": 1}).encode()
                r = await client.post(url, content=ping, headers=signed(ping))
                assert r.status_code == 200 and r.json() == {"type": 1}
                assert (await client.post(url, content=ping)).status_code == 401
                other_key = Ed25519PrivateKey.generate()
                r = await client.post(url, content=ping, headers=signed(ping, other_key))
                assert r.status_code == 401
                command = json.dumps(COMMAND).encode()
                r = await client.post(
                    url, content=command.replace(b"why", b"how"), headers=signed(command)
                )
                assert r.status_code == 401
                assert orch.events == []

                r = await client.post(url, content=command, headers=signed(command))
                assert r.json() == {"type": 4, "data": {"content": "On it.", "flags": 64}}
                button = json.dumps(
                    {
                        "type": 3,
                        "id": "112",
                        "application_id": "999",
                        "token": "t2",
                        "channel_id": "C77",
                        "user": {"id": "U5", "username": "bob"},
                        "data": {"custom_id": "approve", "component_type": 2},
                    }
                ).encode()
                r = await client.post(url, content=button, headers=signed(button))
                assert r.json() == {"type": 6}

                r = await client.post(reply_url, content=command, headers=signed(command))
                assert r.json() == {"type": 5}

            slash, component, asked = await orch.wait_events(3)
            assert slash.name == "slash_command" and slash.instance_key == "discord:C77"
            assert slash.message.text == "/ask\nquestion: why?\nloud: true"
            assert slash.properties == {
                "interaction_id": "111",
                "application_id": "999",
                "channel_id": "C77",
                "guild_id": "G1",
                "user_id": "U5",
                "username": "bob",
                "interaction_token": "interaction-token-abc",
                "command_name": "ask",
                "option_question": "why?",
                "option_loud": "true",
            }
            assert not slash.reply and asked.reply
            assert component.name == "component_interaction"
            assert component.message.text == "approve"
            assert component.properties["custom_id"] == "approve"
            for _ in range(100):
                if edits:
                    break
                await asyncio.sleep(0.05)
            assert edits == [
                (
                    "/api/v10/webhooks/999/interaction-token-abc/messages/@original",
                    {"content": "echo: /ask\nquestion: why?\nloud: true"},
                )
            ]
            await orch.stop("dc", proc)
            await orch.stop("dc-reply", reply_proc)
    finally:
        await runner.cleanup()


async def test_discord_without_public_key_is_a_start_error() -> None:
    async with FakeOrchestrator() as orch:
        write_bundle(orch.dir / "b", CONNECTIONS)
        proc = await orch.spawn(
            "dc", orch.dir / "b", {"DC_PORT": str(free_port()), "DC_KEY": "not-hex"}
        )
        error = await orch.wait_start_error("dc")
        assert await proc.wait() == 3
        assert "DISCORD_PUBLIC_KEY" in error.message
