"""The limits of a ROUTER socket (`ipc.router_socket`), apart from the socket itself: the
daemon's settings include them, and reading settings must not load the socket's code."""

from __future__ import annotations

from typing import Annotated

import msgspec

from ipc import zmtp


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class RouterLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a router's peers may take, and how it reports refusals. The daemon's come from
    `goondan.settings.Settings.ipc`; the defaults suit a swarm of a few hundred agents."""

    backlog: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("connections waiting to be accepted (many agents may start at once)"),
    ] = 1024
    handshake_timeout_s: Annotated[
        float,
        msgspec.Meta(gt=0),
        _doc("a connection must finish its ZMTP handshake within this, or it is dropped"),
    ] = 5.0
    max_handshaking: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("connections in their handshake at once; past it, the oldest makes room"),
    ] = 64
    handshake_grace_s: Annotated[
        float,
        msgspec.Meta(ge=0),
        _doc("a connection in its handshake is never pushed out before this (a busy agent)"),
    ] = 0.25
    fd_reserve: Annotated[
        int,
        msgspec.Meta(ge=0),
        _doc("open files no connection may take: the journal, logs, children's pipes, listeners"),
    ] = 64
    max_buffered_bytes: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc(
            "bytes of incomplete messages over all connections; the connection whose read "
            "passes it is dropped (two of the largest messages fit)"
        ),
    ] = 2 * zmtp.MAX_READ_BYTES
    pong_unread_bytes: Annotated[
        int,
        msgspec.Meta(ge=0),
        _doc("a peer that left this many bytes unread gets no answer to its PINGs"),
    ] = 64 * 1024
    accept_pause_s: Annotated[
        float,
        msgspec.Meta(gt=0),
        _doc("out of open files, accepting pauses this long (connected peers are served)"),
    ] = 0.5
    accept_batch: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("connections accepted per wake-up, so a flood cannot starve the event loop"),
    ] = 128
    report_interval_s: Annotated[
        float,
        msgspec.Meta(gt=0),
        _doc("each kind of refusal is logged at most once per this, with how many there were"),
    ] = 10.0


DEFAULT_LIMITS = RouterLimits()
