"""`discord`: a Discord interactions endpoint (slash commands and message components).

Every request must carry a valid Ed25519 signature of `timestamp + body`
(`X-Signature-Ed25519`, `X-Signature-Timestamp`) by the application's public key, secret
DISCORD_PUBLIC_KEY (or PUBLIC_KEY), else 401 — Discord itself sends such probes before it
accepts the endpoint. PING is answered `{"type": 1}`.

Events: `slash_command` {interaction_id, application_id, channel_id, guild_id, user_id,
username, command_name, option_<name>..., interaction_token} with the text `/<command>` plus one
`<option>: <value>` line per option; `component_interaction` {..., custom_id} with the text
`<custom_id>`. Instance key: `discord:<channel id>`.

Config: HOST (127.0.0.1), PORT (8788), PATH (/), REPLY=true (answer "thinking...", then edit in
the agent's reply through DISCORD_API_BASE_URL, default https://discord.com/api/v10), otherwise
ACK_TEXT (default "Received.") is sent back to the user who ran a command, privately.
"""

from __future__ import annotations

from typing import Any

import httpx
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from base_tools.connectors._common import (
    flag,
    ident,
    parse_object,
    record,
    secret,
    serve_post,
    setting,
    text_field,
)
from goondan import (
    ConnectorConfigError,
    ConnectorContext,
    EventRefused,
    PendingReply,
    ReplyFailed,
    ReplyTimeout,
    TaskSet,
)

PING, APPLICATION_COMMAND, MESSAGE_COMPONENT, AUTOCOMPLETE, MODAL_SUBMIT = 1, 2, 3, 4, 5
PONG, CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE_MESSAGE = 1, 4, 5, 6
AUTOCOMPLETE_RESULT = 8
EPHEMERAL = 64
CONTENT_LIMIT = 2000
DEFAULT_API_BASE_URL = "https://discord.com/api/v10"


def load_public_key(hex_key: str) -> Ed25519PublicKey:
    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key.strip()))
    except ValueError:
        raise ConnectorConfigError(
            "[discord] DISCORD_PUBLIC_KEY must be the application's public key "
            "(64 hex characters, from the developer portal)"
        ) from None


def verify_discord_signature(
    key: Ed25519PublicKey, body: bytes, signature: str | None, timestamp: str | None
) -> bool:
    if not signature or not timestamp:
        return False
    try:
        key.verify(bytes.fromhex(signature), timestamp.encode() + body)
    except (InvalidSignature, ValueError):
        return False
    return True


def _options(options: object, path: list[str], lines: list[str], props: dict[str, str]) -> None:
    for option in options if isinstance(options, list) else []:
        option = record(option)
        name = text_field(option, "name")
        if name is None:
            continue
        if option.get("type") in (1, 2):  # a subcommand (group)
            path.append(name)
            _options(option.get("options"), path, lines, props)
        elif option.get("value") is not None:
            value = option["value"]
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            lines.append(f"{name}: {text}")
            props[f"option_{name}"] = text


def to_event(body: dict[str, Any]) -> dict[str, Any] | None:
    """`ctx.emit` keyword arguments for an interaction, or None for one that carries none."""
    kind = body.get("type")
    if kind not in (APPLICATION_COMMAND, MESSAGE_COMPONENT, MODAL_SUBMIT):
        return None
    member = record(body.get("member"))
    user = record(body.get("user")) or record(member.get("user"))
    data = record(body.get("data"))
    interaction_id = ident(body.get("id"))
    channel_id = ident(body.get("channel_id")) or ident(record(body.get("channel")).get("id"))
    properties: dict[str, str | None] = {
        "interaction_id": interaction_id,
        "application_id": ident(body.get("application_id")),
        "channel_id": channel_id,
        "guild_id": ident(body.get("guild_id")),
        "user_id": ident(user.get("id")),
        "username": text_field(user, "username"),
        "interaction_token": text_field(body, "token"),
    }
    options: dict[str, str] = {}
    if kind == APPLICATION_COMMAND:
        name = "slash_command"
        command = text_field(data, "name") or ""
        path = [command]
        lines: list[str] = []
        _options(data.get("options"), path, lines, options)
        properties["command_name"] = command
        text = "\n".join(["/" + " ".join(path), *lines])
    else:
        name = "component_interaction" if kind == MESSAGE_COMPONENT else "interaction"
        custom_id = text_field(data, "custom_id") or ""
        properties["custom_id"] = custom_id
        values = [str(v) for v in data.get("values") or []]
        text = custom_id + (f"\nvalues: {', '.join(values)}" if values else "")
    return {
        "name": name,
        "text": text,
        "instance_key": f"discord:{channel_id or interaction_id or 'unknown'}",
        "properties": {**{k: v for k, v in properties.items() if v is not None}, **options},
    }


async def _edit_original(
    ctx: ConnectorContext,
    base_url: str,
    pending: PendingReply,
    application_id: str,
    token: str,
) -> None:
    try:
        text = (await pending.reply()).text
    except (ReplyFailed, ReplyTimeout) as exc:
        text = f"Sorry, that failed ({exc.code})."
    url = f"{base_url.rstrip('/')}/webhooks/{application_id}/{token}/messages/@original"
    try:
        async with httpx.AsyncClient() as client:
            response = await client.patch(
                url, json={"content": text[:CONTENT_LIMIT] or "(no answer)"}, timeout=15.0
            )
        if response.status_code >= 300:
            ctx.logger.warning("[discord] editing the reply failed", status=response.status_code)
    except httpx.HTTPError as exc:
        ctx.logger.warning(
            "[discord] editing the reply failed", error=f"{type(exc).__name__}: {exc}"
        )


async def main(ctx: ConnectorContext) -> None:
    hex_key = secret(ctx, "DISCORD_PUBLIC_KEY", "PUBLIC_KEY")
    if hex_key is None:
        raise ConnectorConfigError(
            "[discord] the secret DISCORD_PUBLIC_KEY (the application's public key) is "
            "required: Discord only talks to endpoints that verify signatures"
        )
    key = load_public_key(hex_key)
    reply = flag(ctx, "REPLY")
    ack_text = setting(ctx, "ACK_TEXT") or "Received."
    base_url = setting(ctx, "DISCORD_API_BASE_URL") or DEFAULT_API_BASE_URL
    editing = TaskSet("discord replies")

    async def handle(request: web.Request, body: bytes) -> web.StreamResponse:
        if not verify_discord_signature(
            key,
            body,
            request.headers.get("X-Signature-Ed25519"),
            request.headers.get("X-Signature-Timestamp"),
        ):
            ctx.logger.warning("[discord] signature verification failed")
            return web.Response(status=401, text="invalid request signature")
        interaction = parse_object(body)
        if interaction is None:
            return web.Response(status=400, text="Bad Request")
        kind = interaction.get("type")
        if kind == PING:
            return web.json_response({"type": PONG})
        if kind == AUTOCOMPLETE:
            return web.json_response({"type": AUTOCOMPLETE_RESULT, "data": {"choices": []}})
        event = to_event(interaction)
        if event is None:
            return web.Response(status=400, text="unsupported interaction type")
        props = event["properties"]
        can_edit = "application_id" in props and "interaction_token" in props
        try:
            if reply and can_edit:
                pending = await ctx.start_request(**event)
                editing.spawn(
                    _edit_original(
                        ctx, base_url, pending, props["application_id"], props["interaction_token"]
                    ),
                    name="edit reply",
                )
                return web.json_response({"type": DEFERRED_CHANNEL_MESSAGE})
            await ctx.emit(**event)
        except EventRefused as exc:
            ctx.logger.warning("[discord] event refused", error=exc.message)
            return web.json_response(
                {
                    "type": CHANNEL_MESSAGE,
                    "data": {"content": "Sorry, this cannot be handled now.", "flags": EPHEMERAL},
                }
            )
        if kind == MESSAGE_COMPONENT:
            return web.json_response({"type": DEFERRED_UPDATE_MESSAGE})
        return web.json_response(
            {"type": CHANNEL_MESSAGE, "data": {"content": ack_text, "flags": EPHEMERAL}}
        )

    try:
        await serve_post(ctx, handle, name="discord", default_port=8788)
    finally:
        await editing.close(grace_s=2.0)
