"""Who may speak on agents.sock, and what each may say (DESIGN.md "Trust").

A peer is admitted on its ZMTP READY when its identity is a slot of the swarm and it presents
- that slot's credential for the launch under way (a child the supervisor started): only the
  current incarnation of a slot can take its identity; or
- the operator's key (`run/peer.key`) for an agent slot with no process of its own: an
  external agent, such as the bench's driver, that says `ready` itself (not over TLS).
A peer over the TLS link (an agent on another machine) must also hold a certificate of the
orchestrator's CA issued in that slot's name.
Everything else is refused. What an admitted peer may send depends on its slot's kind.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Literal

import msgspec

from ipc import wire
from ipc.credential import CREDENTIAL_PROPERTY, new_credential
from ipc.tls import PEER_NAME_PROPERTY
from orchestrator.supervisor import ProcessKind, Slot

How = Literal["child", "external"]
PEER_KEY_FILE = "peer.key"  # in the state root's run/: the operator's key

SENDS: dict[ProcessKind, frozenset[str]] = {
    "agent": wire.sent_by("agent"),
    "connector": wire.sent_by("connector"),
}
"""The message types each kind of process sends; anything else from it is dropped."""


class Refused(Exception):
    """The reason a peer is not admitted (sent to it as the ZMTP ERROR, and logged)."""


class Admitted(msgspec.Struct, frozen=True):
    how: How
    launch: bytes | None  # the slot's credential it was admitted with (a child's)

    def speaks_for(self, slot: Slot) -> bool:
        """Still the slot's own peer: a child of the launch under way, or an external agent
        while the slot has no process."""
        if self.how == "child":
            return slot.credential is not None and slot.credential is self.launch
        return slot.credential is None


def admit(slot: Slot | None, properties: dict[bytes, bytes], peer_key: bytes) -> Admitted:
    """Raises Refused unless the peer may speak as `slot` (see the module's docstring)."""
    if slot is None:
        raise Refused("not a process of this swarm")
    presented = properties.get(CREDENTIAL_PROPERTY)
    if presented is None:
        raise Refused("no credential")
    launch = slot.credential
    over_tls = properties.get(PEER_NAME_PROPERTY)  # a remote agent (`ipc.tls`)
    if over_tls is not None and over_tls != slot.name.encode():
        raise Refused("its certificate is not this agent's")
    if launch is not None and hmac.compare_digest(presented, launch):
        return Admitted("child", launch)
    if over_tls is not None:
        raise Refused("wrong credential")  # the operator's key is for this machine only
    if hmac.compare_digest(presented, peer_key):
        if slot.kind != "agent":
            raise Refused("the operator's key is for agents, not connectors")
        if launch is not None:
            raise Refused("the agent has a process of its own")
        return Admitted("external", None)
    raise Refused("wrong credential")


def write_peer_key(path: Path) -> bytes:
    """A fresh operator key in `path` (0600), for external agents; returns it."""
    key = new_credential()
    path.unlink(missing_ok=True)  # a key of an earlier run: never reused
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, key + b"\n")
    finally:
        os.close(fd)
    return key
