"""`webhook`: an HTTP endpoint that turns JSON POSTs into events, optionally answering with the
agent's reply.

    POST {PATH}   {"text": "hi", "instanceKey": "ticket:7", "properties": {...}, "wait": true}
    X-Signature-256: sha256=<hex HMAC-SHA256 of the raw body with the signing secret>

Body fields (upstream's `emitWebhookPayload`): `event` | `name` (default `webhook_message`),
`text` | `message` (a string, or `{type: image|file, url, name}`), `instanceKey` (default
`webhook:default`), `properties` (scalars; other values are dropped), `wait`.

Config: HOST (127.0.0.1), PORT (8080), PATH (/), DEFAULT_EVENT_NAME, DEFAULT_INSTANCE_KEY,
REQUIRE_SIGNATURE (refuse to start without a secret), WAIT_TIMEOUT_SECONDS (120).
Secrets: SIGNING_SECRET, WEBHOOK_SECRET (or upstream's signingSecret). With a secret, a request
without a valid signature gets 401 and emits nothing.

Answers: 202 `{"accepted": true, "agent", "instanceKey"}` once the event is journaled;
with `wait: true` (or `?wait=1`) 200 `{"reply": "...", "agent", "instanceKey"}`. 400 for a bad
body, 401 bad signature, 422 refused, 502 the turn failed, 503 orchestrator not answering,
504 no reply in time.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from base_tools.connectors._common import (
    flag,
    hmac_sha256_hex,
    int_setting,
    json_error,
    parse_object,
    same,
    secret,
    serve_post,
    setting,
    text_field,
    truthy,
)
from goondan import (
    ConnectorConfigError,
    ConnectorContext,
    EventNotAcknowledged,
    EventRefused,
    ReplyFailed,
    ReplyTimeout,
    stringify_properties,
)

DEFAULT_EVENT = "webhook_message"
DEFAULT_INSTANCE_KEY = "webhook:default"
SIGNATURE_HEADERS = ("X-Signature-256", "X-Hub-Signature-256", "X-Webhook-Signature")
SECRET_KEYS = ("SIGNING_SECRET", "WEBHOOK_SECRET", "signingSecret")


def verify_signature(body: bytes, signature: str | None, signing_secret: str) -> bool:
    """HMAC-SHA256 hex of the raw body; a `sha256=` prefix is optional."""
    if not signature:
        return False
    received = signature.strip().removeprefix("sha256=")
    return same(hmac_sha256_hex(signing_secret, body), received)


def parse_payload(
    payload: dict[str, Any], *, default_event: str, default_key: str
) -> dict[str, Any]:
    """The keyword arguments of `ctx.emit` for a webhook body."""
    name = text_field(payload, "event", "name") or default_event
    instance_key = text_field(payload, "instanceKey") or default_key
    message = payload.get("message")
    properties_value = payload.get("properties")
    properties = stringify_properties(
        properties_value if isinstance(properties_value, dict) else {}, drop_invalid=True
    )
    if isinstance(message, dict) and message.get("type") in ("image", "file"):
        return {
            "name": name,
            "instance_key": instance_key,
            "properties": properties,
            "message": message,
        }
    text = text_field(payload, "text", "message") or ""
    return {"name": name, "instance_key": instance_key, "properties": properties, "text": text}


async def main(ctx: ConnectorContext) -> None:
    signing_secret = secret(ctx, *SECRET_KEYS)
    if signing_secret is None and flag(ctx, "REQUIRE_SIGNATURE"):
        raise ConnectorConfigError(
            "[webhook] REQUIRE_SIGNATURE is set but no secret SIGNING_SECRET / WEBHOOK_SECRET"
        )
    if signing_secret is None:
        ctx.logger.warning("[webhook] no signing secret: unsigned requests are accepted")
    default_event = setting(ctx, "DEFAULT_EVENT_NAME", "defaultEventName") or DEFAULT_EVENT
    default_key = setting(ctx, "DEFAULT_INSTANCE_KEY", "defaultInstanceKey") or DEFAULT_INSTANCE_KEY
    wait_timeout = int_setting(ctx, "WAIT_TIMEOUT_SECONDS", default=120, minimum=1)

    async def handle(request: web.Request, body: bytes) -> web.StreamResponse:
        if signing_secret is not None:
            signature = next(
                (request.headers[h] for h in SIGNATURE_HEADERS if h in request.headers), None
            )
            if not verify_signature(body, signature, signing_secret):
                ctx.logger.warning(
                    "[webhook] signature verification failed", signed=signature is not None
                )
                return json_error(401, "E_BAD_SIGNATURE", "missing or invalid signature")
        payload = parse_object(body)
        if payload is None:
            return json_error(400, "E_BAD_PAYLOAD", "the body must be a JSON object")
        event = parse_payload(payload, default_event=default_event, default_key=default_key)
        wait = truthy(payload.get("wait")) or truthy(request.query.get("wait", ""))
        try:
            if not wait:
                ack = await ctx.emit(**event)
                return web.json_response(
                    {"accepted": True, "agent": ack.agent, "instanceKey": ack.instance_key},
                    status=202,
                )
            reply = await ctx.request(**event, timeout_s=wait_timeout)
        except (ValueError, TypeError) as exc:
            return json_error(400, "E_BAD_PAYLOAD", str(exc))
        except EventRefused as exc:
            return json_error(422, exc.code, exc.message)
        except EventNotAcknowledged as exc:
            return json_error(503, exc.code, exc.message)
        except ReplyFailed as exc:
            return json_error(502, exc.code, exc.message)
        except ReplyTimeout as exc:
            return json_error(504, exc.code, exc.message)
        return web.json_response(
            {"reply": reply.text, "agent": reply.agent, "instanceKey": reply.instance_key}
        )

    await serve_post(ctx, handle, name="webhook", default_port=8080)
