"""The built-in `webhook` connector over real HTTP on 127.0.0.1, in its real process."""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx
import pytest

from ipc import messages as wire
from tests.fakes.fake_orchestrator import (
    FakeOrchestrator,
    free_port,
    wait_listening,
    write_bundle,
)

pytestmark = pytest.mark.timeout(30)

SECRET = "whsec-0123456789abcdef"

CONNECTION = """
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: hooks
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  config:
    PORT: {valueFrom: {env: HOOK_PORT}}
    PATH: {value: "/hooks/in/"}
  secrets:
    SIGNING_SECRET: {valueFrom: {env: HOOK_SECRET}}
  ingress:
    rules:
      - route: {}
"""


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def test_webhook_signed_unsigned_tampered_and_sync_reply() -> None:
    async with FakeOrchestrator() as orch:
        port = free_port()
        write_bundle(orch.dir / "b", CONNECTION)
        orch.answer = lambda e: (
            wire.ErrorInfo("E_AGENT_REQUEST_TIMEOUT", "too slow")
            if e.message.text == "slow"
            else f"echo: {e.message.text}"
        )
        orch.refuse = lambda e: (
            wire.ErrorInfo("E_NO_ROUTE", "no rule matched") if e.name == "nobody" else None
        )
        proc = await orch.spawn(
            "hooks", orch.dir / "b", {"HOOK_PORT": str(port), "HOOK_SECRET": SECRET}
        )
        await orch.wait_ready("hooks", proc)
        url = f"http://127.0.0.1:{port}/hooks/in"
        await wait_listening(url, proc)
        async with httpx.AsyncClient(timeout=10) as client:
            body = json.dumps(
                {
                    "text": "hello",
                    "instanceKey": "ticket:7",
                    "properties": {"priority": 3, "urgent": True, "nested": {"x": 1}},
                }
            ).encode()
            r = await client.post(url, content=body, headers={"X-Signature-256": sign(body)})
            assert r.status_code == 202, r.text
            assert r.json() == {"accepted": True, "agent": "assistant", "instanceKey": "ticket:7"}

            # The bare hex form, the default event name and instance key, a trailing slash.
            bare = json.dumps({"message": "plain"}).encode()
            r = await client.post(
                url + "/",
                content=bare,
                headers={"X-Signature-256": sign(bare).removeprefix("sha256=")},
            )
            assert r.status_code == 202, r.text

            r = await client.post(url, content=body)
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "E_BAD_SIGNATURE"
            tampered = body.replace(b"hello", b"HELLO")
            r = await client.post(url, content=tampered, headers={"X-Signature-256": sign(body)})
            assert r.status_code == 401
            r = await client.post(
                url, content=body, headers={"X-Signature-256": sign(body, "wrong-secret")}
            )
            assert r.status_code == 401

            ask = json.dumps({"text": "what time is it?", "wait": True}).encode()
            r = await client.post(url, content=ask, headers={"X-Signature-256": sign(ask)})
            assert r.status_code == 200, r.text
            assert r.json() == {
                "reply": "echo: what time is it?",
                "agent": "assistant",
                "instanceKey": "webhook:default",
            }
            ask = json.dumps({"event": "custom", "text": "via query"}).encode()
            r = await client.post(
                url + "?wait=1", content=ask, headers={"X-Signature-256": sign(ask)}
            )
            assert r.json()["reply"] == "echo: via query"

            slow = json.dumps({"text": "slow", "wait": True}).encode()
            r = await client.post(url, content=slow, headers={"X-Signature-256": sign(slow)})
            assert r.status_code == 502
            assert r.json()["error"]["code"] == "E_AGENT_REQUEST_TIMEOUT"
            refused = json.dumps({"name": "nobody", "text": "x"}).encode()
            r = await client.post(url, content=refused, headers={"X-Signature-256": sign(refused)})
            assert r.status_code == 422 and r.json()["error"]["code"] == "E_NO_ROUTE"

            junk = b"[1, 2]"
            r = await client.post(url, content=junk, headers={"X-Signature-256": sign(junk)})
            assert r.status_code == 400
            assert (await client.get(url)).status_code == 405
            assert (
                await client.post(f"http://127.0.0.1:{port}/other", content=body)
            ).status_code == 404

        events = [event for _, event in orch.events]
        assert [(e.name, e.message.text, e.instance_key, e.reply) for e in events] == [
            ("webhook_message", "hello", "ticket:7", False),
            ("webhook_message", "plain", "webhook:default", False),
            ("webhook_message", "what time is it?", "webhook:default", True),
            ("custom", "via query", "webhook:default", True),
            ("webhook_message", "slow", "webhook:default", True),
            ("nobody", "x", "webhook:default", False),
        ]
        assert events[0].properties == {"priority": "3", "urgent": "true"}
        await orch.stop("hooks", proc)
        logs = proc.logs()
        assert SECRET not in logs
        assert "signature verification failed" in logs


async def test_webhook_without_secret_accepts_unsigned_and_require_signature_refuses_to_start() -> (
    None
):
    async with FakeOrchestrator() as orch:
        port = free_port()
        write_bundle(
            orch.dir / "b",
            """
            apiVersion: goondan.ai/v1
            kind: Connection
            metadata:
              name: open
            spec:
              connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
              config:
                PORT: {valueFrom: {env: HOOK_PORT}}
            ---
            apiVersion: goondan.ai/v1
            kind: Connection
            metadata:
              name: strict
            spec:
              connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
              config:
                PORT: {valueFrom: {env: HOOK_PORT}}
                REQUIRE_SIGNATURE: {value: "true"}
        """,
        )
        proc = await orch.spawn("open", orch.dir / "b", {"HOOK_PORT": str(port)})
        await orch.wait_ready("open", proc)
        url = f"http://127.0.0.1:{port}/"
        await wait_listening(url, proc)
        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.post(url, json={"text": "hi"})
        assert r.status_code == 202
        assert (await orch.wait_events(1))[0].message.text == "hi"
        await orch.stop("open", proc)

        strict = await orch.spawn("strict", orch.dir / "b", {"HOOK_PORT": str(port)})
        error = await orch.wait_start_error("strict")
        assert await strict.wait() == 3
        assert "REQUIRE_SIGNATURE" in error.message
