"""`webhook`: an HTTP endpoint that turns JSON POSTs into events, optionally answering with the
agent's reply.

    POST {PATH}   {"text": "hi", "instanceKey": "ticket:7", "properties": {...}, "wait": true}
    X-Webhook-Timestamp: <Unix seconds>
    X-Signature-256: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>" with the secret>

Body fields (upstream's `emitWebhookPayload`): `event` | `name` (default `webhook_message`),
`text` | `message` (a string, or `{type: image|file, url, name}`), `instanceKey` (default
`webhook:default`), `properties` (scalars; other values are dropped), `wait`.

Config: HOST (127.0.0.1), PORT (8080), PATH (/), DEFAULT_EVENT_NAME, DEFAULT_INSTANCE_KEY,
REQUIRE_SIGNATURE (refuse to start without a secret), WAIT_TIMEOUT_SECONDS (120),
TIMESTAMP_TOLERANCE_SECONDS (300), BODY_TIMEOUT_SECONDS (30), MAX_BODY_BYTES (1 MiB).
Secrets: SIGNING_SECRET, WEBHOOK_SECRET (or upstream's signingSecret). With a secret, a request
without a valid signature, or whose signed timestamp is further from now than the tolerance,
gets 401 and emits nothing; a signature already taken within the window gets 409 (a replay).

Answers: 202 `{"accepted": true, "agent", "instanceKey", "traceId"}` once the event is
journaled; with `wait: true` (or `?wait=1`) 200 `{"reply": "...", "agent", "instanceKey",
"traceId"}` (a 502 or 504 after acceptance carries `traceId` too).

    POST {PATH}/cancel   {"traceId": "<32 hex>"}    (signed as any request)

cancels the running turns of a trace that this webhook started, down the delegation chain:
200 `{"cancelled": N, "traceId"}` (0 when it already finished or is not this webhook's).
A caller waiting on it gets 502 with `E_TURN_CANCELLED`. 400 for a bad
body, 401 bad signature or stale timestamp, 408 body too slow, 409 replay, 413 body too
large, 422 refused, 502 the turn failed, 503 orchestrator not answering, 504 no reply in time.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from base_tools.connectors._common import (
    flag,
    hmac_sha256_hex,
    int_setting,
    json_error,
    normalize_path,
    parse_object,
    same,
    secret,
    serve_post,
    setting,
    text_field,
    truthy,
)
from base_tools.connectors._replay import TOLERANCE_S, ReplayGuard
from goondan import (
    ConnectorConfigError,
    ConnectorContext,
    ConnectorError,
    ErrorCode,
    EventNotAcknowledged,
    EventRefused,
    ReplyFailed,
    ReplyTimeout,
    stringify_properties,
)

DEFAULT_EVENT = "webhook_message"
DEFAULT_INSTANCE_KEY = "webhook:default"
SIGNATURE_HEADERS = ("X-Signature-256", "X-Hub-Signature-256", "X-Webhook-Signature")
TIMESTAMP_HEADER = "X-Webhook-Timestamp"
CANCEL_PATH = "/cancel"
SECRET_KEYS = ("SIGNING_SECRET", "WEBHOOK_SECRET", "signingSecret")


def verify_signature(
    body: bytes, timestamp: str, signature: str | None, signing_secret: str
) -> bool:
    """HMAC-SHA256 hex of `<timestamp>.<raw body>` (Stripe's scheme: the timestamp is signed,
    so a replay cannot be made fresh); a `sha256=` prefix is optional."""
    if not signature:
        return False
    received = signature.strip().removeprefix("sha256=")
    signed = timestamp.encode() + b"." + body
    return same(hmac_sha256_hex(signing_secret, signed), received)


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
    tolerance = int_setting(ctx, "TIMESTAMP_TOLERANCE_SECONDS", default=TOLERANCE_S, minimum=1)
    replays = ReplayGuard(tolerance)

    async def handle(request: web.Request, body: bytes) -> web.StreamResponse:
        if signing_secret is None:
            return await answer(request, body)
        signature = next(
            (request.headers[h] for h in SIGNATURE_HEADERS if h in request.headers), None
        )
        timestamp = request.headers.get(TIMESTAMP_HEADER, "")
        if not verify_signature(body, timestamp, signature, signing_secret):
            ctx.logger.warning(
                "[webhook] signature verification failed",
                signed=signature is not None,
                timestamped=bool(timestamp),
            )
            return json_error(
                401,
                ErrorCode.E_BAD_SIGNATURE,
                f"missing or invalid signature (HMAC-SHA256 of '<{TIMESTAMP_HEADER}>.<body>')",
            )
        problem = replays.timestamp_problem(timestamp)
        if problem is not None:
            ctx.logger.warning("[webhook] stale timestamp refused", problem=problem)
            return json_error(401, ErrorCode.E_STALE_TIMESTAMP, problem)
        assert signature is not None
        key = signature.strip().removeprefix("sha256=")
        if not replays.take(key):
            ctx.logger.warning("[webhook] replayed request refused")
            return json_error(409, ErrorCode.E_REPLAYED, "this signed request was already taken")
        try:
            response = await answer(request, body)
        except BaseException:
            replays.release(key)
            raise
        if response.status in (400, 503):  # nothing was accepted: the sender may retry
            replays.release(key)
        return response

    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        if normalize_path(request.path).endswith(CANCEL_PATH):
            return await cancel(body)
        return await emit(request, body)

    async def cancel(body: bytes) -> web.StreamResponse:
        payload = parse_object(body)
        trace_id = text_field(payload, "traceId") if payload is not None else None
        if not trace_id:
            return json_error(
                400, ErrorCode.E_BAD_PAYLOAD, 'the body must be {"traceId": "<the trace id>"}'
            )
        try:
            cancelled = await ctx.cancel(trace_id)
        except ConnectorError as exc:
            return json_error(503, exc.code or ErrorCode.E_TIMEOUT, exc.message)
        return web.json_response({"cancelled": cancelled, "traceId": trace_id})

    async def emit(request: web.Request, body: bytes) -> web.StreamResponse:
        payload = parse_object(body)
        if payload is None:
            return json_error(400, ErrorCode.E_BAD_PAYLOAD, "the body must be a JSON object")
        event = parse_payload(payload, default_event=default_event, default_key=default_key)
        event["traceparent"] = request.headers.get("traceparent")  # the caller's trace goes on
        wait = truthy(payload.get("wait")) or truthy(request.query.get("wait", ""))
        try:
            if not wait:
                ack = await ctx.emit(**event)
                return web.json_response(
                    {
                        "accepted": True,
                        "agent": ack.agent,
                        "instanceKey": ack.instance_key,
                        "traceId": ack.trace_id,
                    },
                    status=202,
                )
            pending = await ctx.start_request(**event)
        except (ValueError, TypeError) as exc:
            return json_error(400, ErrorCode.E_BAD_PAYLOAD, str(exc))
        except EventRefused as exc:
            return json_error(422, exc.code, exc.message)
        except EventNotAcknowledged as exc:
            return json_error(503, exc.code, exc.message)
        trace_id = pending.ack.trace_id  # for `goondan logs --trace`, failed or not
        try:
            reply = await pending.reply(wait_timeout)
        except ReplyFailed as exc:
            return _failed(502, exc, trace_id)
        except ReplyTimeout as exc:
            return _failed(504, exc, trace_id)
        return web.json_response(
            {
                "reply": reply.text,
                "agent": reply.agent,
                "instanceKey": reply.instance_key,
                "traceId": trace_id,
            }
        )

    await serve_post(ctx, handle, name="webhook", default_port=8080, subpaths=(CANCEL_PATH,))


def _failed(status: int, exc: ReplyFailed | ReplyTimeout, trace_id: str) -> web.Response:
    """An accepted event's error answer, with the trace to look its turn up by."""
    error = {"code": exc.code, "message": exc.message}
    return web.json_response({"error": error, "traceId": trace_id}, status=status)
