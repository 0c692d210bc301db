"""The built-in `webhook` connector over real HTTP on 127.0.0.1, in its real process."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time

import httpx
import pytest

from ipc import wire
from tests.fakes.fake_orchestrator import (
    ConnectorProc,
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


def signed(
    body: bytes, secret: str = SECRET, *, at: float | None = None, prefix: str = "sha256="
) -> dict[str, str]:
    """The headers of a request signed at `at` (now by default)."""
    timestamp = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return {"X-Webhook-Timestamp": timestamp, "X-Signature-256": prefix + digest.hexdigest()}


async def start_listening(
    orch: FakeOrchestrator, name: str, url: str, env: dict[str, str] | None = None
) -> ConnectorProc:
    """The connection `name` of the bundle in `orch.dir / "b"`, ready and serving `url`."""
    port = str(httpx.URL(url).port)
    proc = await orch.spawn(name, orch.dir / "b", {"HOOK_PORT": port, **(env or {})})
    await orch.wait_ready(name, proc)
    await wait_listening(url, proc)
    return proc


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
        url = f"http://127.0.0.1:{port}/hooks/in"
        proc = await start_listening(orch, "hooks", url, {"HOOK_SECRET": SECRET})
        async with httpx.AsyncClient(timeout=10) as client:
            body = json.dumps(
                {
                    "text": "hello",
                    "instanceKey": "ticket:7",
                    "properties": {"priority": 3, "urgent": True, "nested": {"x": 1}},
                }
            ).encode()
            r = await client.post(url, content=body, headers=signed(body))
            assert r.status_code == 202, r.text
            answer = r.json()
            # The trace the event travels under: `goondan logs --trace` finds its turn by it.
            assert answer.pop("traceId") == orch.events[-1][0].trace_id
            assert answer == {"accepted": True, "agent": "assistant", "instanceKey": "ticket:7"}

            # The bare hex form, the default event name and instance key, a trailing slash.
            bare = json.dumps({"message": "plain"}).encode()
            r = await client.post(
                url + "/",
                content=bare,
                headers=signed(bare, prefix=""),
            )
            assert r.status_code == 202, r.text

            r = await client.post(url, content=body)
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "E_BAD_SIGNATURE"
            tampered = body.replace(b"hello", b"HELLO")
            r = await client.post(url, content=tampered, headers=signed(body))
            assert r.status_code == 401
            r = await client.post(url, content=body, headers=signed(body, "wrong-secret"))
            assert r.status_code == 401

            ask = json.dumps({"text": "what time is it?", "wait": True}).encode()
            r = await client.post(url, content=ask, headers=signed(ask))
            assert r.status_code == 200, r.text
            answer = r.json()
            assert answer.pop("traceId") == orch.events[-1][0].trace_id
            assert answer == {
                "reply": "echo: what time is it?",
                "agent": "assistant",
                "instanceKey": "webhook:default",
            }
            ask = json.dumps({"event": "custom", "text": "via query"}).encode()
            r = await client.post(url + "?wait=1", content=ask, headers=signed(ask))
            assert r.json()["reply"] == "echo: via query"

            slow = json.dumps({"text": "slow", "wait": True}).encode()
            r = await client.post(url, content=slow, headers=signed(slow))
            assert r.status_code == 502
            assert r.json()["error"]["code"] == "E_AGENT_REQUEST_TIMEOUT"
            assert r.json()["traceId"] == orch.events[-1][0].trace_id
            refused = json.dumps({"name": "nobody", "text": "x"}).encode()
            r = await client.post(url, content=refused, headers=signed(refused))
            assert r.status_code == 422 and r.json()["error"]["code"] == "E_NO_ROUTE"

            junk = b"[1, 2]"
            r = await client.post(url, content=junk, headers=signed(junk))
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
        url = f"http://127.0.0.1:{port}/"
        proc = await start_listening(orch, "open", url)
        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.post(url, json={"text": "hi"})
        assert r.status_code == 202
        assert (await orch.wait_events(1))[0].message.text == "hi"
        await orch.stop("open", proc)

        strict = await orch.spawn("strict", orch.dir / "b", {"HOOK_PORT": str(port)})
        error = await orch.wait_start_error("strict")
        assert await strict.wait() == 3
        assert "REQUIRE_SIGNATURE" in error.message


async def test_a_replayed_or_stale_signed_request_is_refused() -> None:
    async with FakeOrchestrator() as orch:
        port = free_port()
        write_bundle(orch.dir / "b", CONNECTION)
        url = f"http://127.0.0.1:{port}/hooks/in"
        proc = await start_listening(orch, "hooks", url, {"HOOK_SECRET": SECRET})
        async with httpx.AsyncClient(timeout=10) as client:
            body = json.dumps({"text": "pay 10 EUR"}).encode()
            headers = signed(body)
            r = await client.post(url, content=body, headers=headers)
            assert r.status_code == 202, r.text

            r = await client.post(url, content=body, headers=headers)  # the same delivery
            assert r.status_code == 409, r.text
            assert r.json()["error"]["code"] == "E_REPLAYED"

            # Made fresh by a new timestamp: the signature no longer matches.
            forged = {**headers, "X-Webhook-Timestamp": str(int(time.time()) + 1)}
            r = await client.post(url, content=body, headers=forged)
            assert r.status_code == 401

            r = await client.post(url, content=body, headers=signed(body, at=time.time() - 600))
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "E_STALE_TIMESTAMP"

            untimed = {"X-Signature-256": headers["X-Signature-256"]}
            r = await client.post(url, content=body, headers=untimed)
            assert r.status_code == 401

            again = json.dumps({"text": "pay 10 EUR", "n": 2}).encode()
            r = await client.post(url, content=again, headers=signed(again))
            assert r.status_code == 202, r.text

        assert [e.message.text for e in await orch.wait_events(2)] == ["pay 10 EUR"] * 2
        await orch.stop("hooks", proc)
        assert len(orch.events) == 2, "a refused request emitted an event"
        assert "replayed request refused" in proc.logs()


LIMITED = """
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: limited
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  config:
    PORT: {valueFrom: {env: HOOK_PORT}}
    BODY_TIMEOUT_SECONDS: {value: "1"}
    MAX_BODY_BYTES: {value: "1000"}
  ingress:
    rules:
      - route: {}
"""


async def test_a_trickling_body_is_cut_off_and_a_large_one_refused() -> None:
    async with FakeOrchestrator() as orch:
        port = free_port()
        write_bundle(orch.dir / "b", LIMITED)
        proc = await start_listening(orch, "limited", f"http://127.0.0.1:{port}/")

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
        await writer.drain()

        async def trickle() -> None:
            with contextlib.suppress(ConnectionError):
                for _ in range(400):  # far slower than 500 bytes a second
                    await asyncio.sleep(0.1)
                    writer.write(b" ")
                    await writer.drain()

        trickling = asyncio.create_task(trickle())
        try:
            # The answer, then the end of the stream: the connection is closed.
            answer = await asyncio.wait_for(reader.read(), 20)
        finally:
            trickling.cancel()
            await asyncio.gather(trickling, return_exceptions=True)
            writer.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"E_BODY_TIMEOUT" in answer

        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.post(f"http://127.0.0.1:{port}/", content=b"x" * 1001)
            assert r.status_code == 413
            r = await client.post(f"http://127.0.0.1:{port}/", json={"text": "fits"})
            assert r.status_code == 202
        assert [e.message.text for e in await orch.wait_events(1)] == ["fits"]
        await orch.stop("limited", proc)
