"""The built-in `github` connector: signed deliveries over real HTTP, mapped to events."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from tests.fakes.fake_orchestrator import (
    FakeOrchestrator,
    free_port,
    wait_listening,
    write_bundle,
)

pytestmark = pytest.mark.timeout(30)

SECRET = "gh-webhook-secret-42"
REPO = {"full_name": "octo/hello", "name": "hello"}
SENDER = {"login": "mona"}

CONNECTION = """
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: gh
spec:
  connectorRef: {kind: Connector, name: github, package: "@goondan/base"}
  config:
    PORT: {valueFrom: {env: GH_PORT}}
    PATH: {value: /github}
  secrets:
    GITHUB_WEBHOOK_SECRET: {valueFrom: {env: GH_SECRET}}
  ingress:
    rules:
      - route: {}
"""


def headers(event: str, body: bytes, *, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": event,
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Delivery": f"d-{event}",
        "Content-Type": "application/json",
    }


async def test_github_signatures_and_event_mapping() -> None:
    async with FakeOrchestrator() as orch:
        port = free_port()
        write_bundle(orch.dir / "b", CONNECTION)
        proc = await orch.spawn("gh", orch.dir / "b", {"GH_PORT": str(port), "GH_SECRET": SECRET})
        url = f"http://127.0.0.1:{port}/github"
        await wait_listening(url, proc)
        deliveries: list[tuple[str, dict[str, Any]]] = [
            (
                "push",
                {
                    "ref": "refs/heads/main",
                    "compare": "https://github.com/c",
                    "head_commit": {"message": "Fix the bug"},
                },
            ),
            (
                "pull_request",
                {
                    "action": "opened",
                    "pull_request": {
                        "number": 7,
                        "title": "Add feature",
                        "html_url": "https://github.com/pr/7",
                    },
                },
            ),
            ("issues", {"action": "opened", "issue": {"number": 8, "title": "It breaks"}}),
            (
                "issue_comment",
                {"action": "created", "issue": {"number": 8}, "comment": {"body": "+1, same here"}},
            ),
            ("release", {"action": "published"}),
        ]
        async with httpx.AsyncClient(timeout=10) as client:
            ping = json.dumps({"zen": "Keep it simple.", "repository": REPO}).encode()
            r = await client.post(url, content=ping, headers=headers("ping", ping))
            assert r.status_code == 200 and r.json()["zen"] == "Keep it simple."

            body = json.dumps({**deliveries[0][1], "repository": REPO, "sender": SENDER}).encode()
            unsigned = {
                k: v for k, v in headers("push", body).items() if k != "X-Hub-Signature-256"
            }
            assert (await client.post(url, content=body, headers=unsigned)).status_code == 401
            r = await client.post(url, content=body, headers=headers("push", body, secret="x"))
            assert r.status_code == 401
            r = await client.post(url, content=body + b" ", headers=headers("push", body))
            assert r.status_code == 401
            assert orch.events == []

            for event, payload in deliveries:
                body = json.dumps({**payload, "repository": REPO, "sender": SENDER}).encode()
                r = await client.post(url, content=body, headers=headers(event, body))
                assert r.status_code == 202, r.text
            # A form-encoded delivery (the other content type GitHub offers).
            form = urlencode(
                {
                    "payload": json.dumps(
                        {
                            "action": "closed",
                            "repository": REPO,
                            "issue": {"number": 9, "title": "Done"},
                        }
                    )
                }
            )
            form_headers = {
                **headers("issues", form.encode()),
                "Content-Type": "application/x-www-form-urlencoded",
            }
            r = await client.post(url, content=form.encode(), headers=form_headers)
            assert r.status_code == 202, r.text

        events = await orch.wait_events(6)
        assert [(e.name, e.message.text) for e in events] == [
            ("github_push", "Fix the bug"),
            ("github_pull_request", "Add feature"),
            ("github_issue", "It breaks"),
            ("github_issue_comment", "+1, same here"),
            ("github_release", "release published"),
            ("github_issue", "Done"),
        ]
        assert {e.instance_key for e in events} == {"github:octo/hello"}
        push, pr = events[0], events[1]
        assert push.properties == {
            "event": "push",
            "repo": "octo/hello",
            "sender": "mona",
            "delivery_id": "d-push",
            "ref": "refs/heads/main",
            "url": "https://github.com/c",
        }
        assert pr.properties == {
            "event": "pull_request",
            "action": "opened",
            "repo": "octo/hello",
            "sender": "mona",
            "delivery_id": "d-pull_request",
            "number": "7",
            "url": "https://github.com/pr/7",
        }
        assert events[3].properties["number"] == "8"
        await orch.stop("gh", proc)
        assert SECRET not in proc.logs()
