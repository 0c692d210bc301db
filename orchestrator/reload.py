"""What a bundle reload changes: a fingerprint per agent of everything its process loads."""

from __future__ import annotations

import hashlib

import msgspec

from goondan.bundle import Bundle, Resource, codes
from goondan.bundle.reading import read_regular_file


def agent_fingerprints(bundle: Bundle, swarm: Resource) -> dict[str, str]:
    """Agent name -> digest of its Agent, Model and Tool resources, its tools' entry files,
    its system prompt and the swarm's policy. Equal digests: no restart needed."""
    prints: dict[str, str] = {}
    policy = msgspec.json.encode(swarm.spec.policy)
    for name, agent in bundle.swarm_agents(swarm).items():
        digest = hashlib.sha256(policy)
        for resource in (agent, bundle.agent_model(agent), *bundle.agent_tools(agent)):
            digest.update(msgspec.json.encode([resource.kind, resource.name, resource.spec]))
            if resource.kind == "Tool":
                digest.update(_read(resource))
        digest.update((bundle.system_prompt(agent) or "").encode())
        prints[name] = digest.hexdigest()
    return prints


def _read(resource: Resource) -> bytes:
    try:
        return read_regular_file(resource.entry_path(), codes.MAX_ENTRY_BYTES)
    except OSError:
        return b""


def connection_fingerprints(bundle: Bundle, connections: dict[str, Resource]) -> dict[str, str]:
    """Process name -> digest of its Connection, Connector and the connector's entry file."""
    prints: dict[str, str] = {}
    for name, connection in connections.items():
        connector = bundle.resolve(connection.spec.connector_ref, connection.package)
        digest = hashlib.sha256()
        for resource in (connection, connector):
            digest.update(msgspec.json.encode([resource.kind, resource.name, resource.spec]))
        digest.update(_read(connector))
        prints[name] = digest.hexdigest()
    return prints
