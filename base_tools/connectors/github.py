"""`github`: a GitHub webhook endpoint.

Events by `X-GitHub-Event`: `github_push` (text: the head commit's message), `github_pull_request`
(the PR title), `github_issue` (`issues`: the issue title), `github_issue_comment` (the
comment), and `github_<event>` for any other kind; `ping` is answered and emits nothing.
Properties: event, action, repo, sender, ref, number, url, delivery_id. Instance key:
`github:<owner/repo>` (`github:<event>` without a repository).

Config: HOST (127.0.0.1), PORT (8789), PATH (/). Secrets: GITHUB_WEBHOOK_SECRET |
WEBHOOK_SECRET | SIGNING_SECRET | signingSecret: with one, a request without a valid
`X-Hub-Signature-256` (`sha256=` HMAC-SHA256 of the raw body) gets 401 and emits nothing.
JSON and form-encoded (`payload=...`) deliveries are both accepted.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from base_tools.connectors._common import (
    hmac_sha256_hex,
    ident,
    json_error,
    parse_object,
    record,
    same,
    secret,
    serve_post,
    text_field,
)
from goondan import ConnectorContext, ErrorCode, EventRefused

SECRET_KEYS = ("GITHUB_WEBHOOK_SECRET", "WEBHOOK_SECRET", "SIGNING_SECRET", "signingSecret")
NAMES = {
    "push": "github_push",
    "pull_request": "github_pull_request",
    "issues": "github_issue",
    "issue_comment": "github_issue_comment",
}


def verify_github_signature(body: bytes, signature: str | None, webhook_secret: str) -> bool:
    if not signature:
        return False
    return same("sha256=" + hmac_sha256_hex(webhook_secret, body), signature.strip())


def to_event(event_type: str, body: dict[str, Any], delivery: str | None = None) -> dict[str, Any]:
    """`ctx.emit` keyword arguments for a delivery (upstream's `parseGithubWebhook`)."""
    action = text_field(body, "action")
    repo = text_field(record(body.get("repository")), "full_name")
    properties: dict[str, str | None] = {
        "event": event_type,
        "action": action,
        "repo": repo,
        "sender": text_field(record(body.get("sender")), "login"),
        "delivery_id": delivery,
    }
    if event_type == "push":
        ref = text_field(body, "ref")
        properties["ref"] = ref
        properties["url"] = text_field(body, "compare")
        text = text_field(record(body.get("head_commit")), "message") or f"push to {ref or '?'}"
    elif event_type in ("pull_request", "issues"):
        item = record(body.get("pull_request" if event_type == "pull_request" else "issue"))
        properties["number"] = ident(item.get("number"))
        properties["url"] = text_field(item, "html_url")
        kind = "PR" if event_type == "pull_request" else "Issue"
        text = text_field(item, "title") or f"{kind} {action or ''}".strip()
    elif event_type == "issue_comment":
        comment = record(body.get("comment"))
        properties["number"] = ident(record(body.get("issue")).get("number"))
        properties["url"] = text_field(comment, "html_url")
        text = text_field(comment, "body") or "comment"
    else:
        text = f"{event_type} {action}" if action else event_type
    return {
        "name": NAMES.get(event_type, f"github_{event_type}"),
        "text": text,
        "instance_key": f"github:{repo or event_type}",
        "properties": {k: v for k, v in properties.items() if v is not None},
    }


def parse_body(content_type: str, body: bytes) -> dict[str, Any] | None:
    if content_type == "application/x-www-form-urlencoded":
        try:
            payload = parse_qs(body.decode()).get("payload", [""])[0]
            value = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            return None
        return value if isinstance(value, dict) else None
    return parse_object(body)


async def main(ctx: ConnectorContext) -> None:
    webhook_secret = secret(ctx, *SECRET_KEYS)
    if webhook_secret is None:
        ctx.logger.warning("[github] no webhook secret: deliveries are not verified")

    async def handle(request: web.Request, body: bytes) -> web.StreamResponse:
        if webhook_secret is not None and not verify_github_signature(
            body, request.headers.get("X-Hub-Signature-256"), webhook_secret
        ):
            ctx.logger.warning("[github] signature verification failed")
            return json_error(
                401, ErrorCode.E_BAD_SIGNATURE, "missing or invalid X-Hub-Signature-256"
            )
        event_type = request.headers.get("X-GitHub-Event", "").strip()
        if not event_type:
            return json_error(400, ErrorCode.E_BAD_PAYLOAD, "missing X-GitHub-Event header")
        payload = parse_body(request.content_type, body)
        if payload is None:
            return json_error(400, ErrorCode.E_BAD_PAYLOAD, "the body must be a JSON object")
        if event_type == "ping":
            return web.json_response({"ok": True, "zen": payload.get("zen")})
        event = to_event(event_type, payload, request.headers.get("X-GitHub-Delivery"))
        try:
            ack = await ctx.emit(**event)
        except EventRefused as exc:
            ctx.logger.warning("[github] event refused", error=exc.message)
            return json_error(422, exc.code, exc.message)
        return web.json_response({"accepted": True, "agent": ack.agent}, status=202)

    await serve_post(ctx, handle, name="github", default_port=8789)
