"""What a bundle reload changes, and whether it may: a fingerprint per process of everything it
loads, and the deep validation (`goondan.bundle.probe`) a reload must pass first."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import NamedTuple

import msgspec

from goondan.bundle import (
    Bundle,
    BundleInvalid,
    ConfigError,
    ConnectionSpec,
    Resource,
    codes,
    load_bundle,
    probe_entries_async,
)
from goondan.bundle.reading import read_regular_file
from orchestrator.connections import swarm_connections


class Reloadable(NamedTuple):
    """A bundle read again that passed deep validation, with what the probe only warned of."""

    bundle: Bundle
    swarm: Resource
    fingerprints: dict[str, str]
    warnings: list[ConfigError]


async def load_for_reload(root: Path, swarm_name: str, import_timeout_s: float) -> Reloadable:
    """Load the bundle at `root` and import the Python entries `swarm_name` uses in a throwaway
    process. Raises BundleInvalid (also for entries that do not import or lack a handler),
    LookupError (the swarm is gone) or OSError. Reading files runs in a thread and the probe is
    an asyncio subprocess, so the loop keeps routing; cancelling it kills the probe."""
    bundle, swarm = await asyncio.to_thread(_load, root, swarm_name)
    problems = await probe_entries_async(bundle, import_timeout_s, swarm_entries(bundle, swarm))
    errors = [p for p in problems if p.severity != "warning"]
    if errors:
        raise BundleInvalid(errors)
    warnings = [p for p in problems if p.severity == "warning"]
    prints = await asyncio.to_thread(swarm_fingerprints, bundle, swarm)
    return Reloadable(bundle, swarm, prints, warnings)


def _load(root: Path, swarm_name: str) -> tuple[Bundle, Resource]:
    bundle = load_bundle(root)
    return bundle, bundle.select_swarm(swarm_name)


def swarm_entries(bundle: Bundle, swarm: Resource) -> list[Resource]:
    """The Tools and Extensions of the swarm's agents and the Connectors of its Connections:
    every entry file a process of this swarm imports, each once."""
    found: dict[tuple[str, str, str], Resource] = {}
    for agent in bundle.swarm_agents(swarm).values():
        for resource in (*bundle.agent_tools(agent), *bundle.agent_extensions(agent)):
            found.setdefault((resource.package, resource.kind, resource.name), resource)
    for connection in swarm_connections(bundle, swarm).values():
        spec: ConnectionSpec = connection.spec
        connector = bundle.resolve(spec.connector_ref, connection.package)
        found.setdefault((connector.package, connector.kind, connector.name), connector)
    return list(found.values())


def swarm_fingerprints(bundle: Bundle, swarm: Resource) -> dict[str, str]:
    """Process name -> fingerprint, for the swarm's agents and Connections."""
    connections = swarm_connections(bundle, swarm)
    return {**agent_fingerprints(bundle, swarm), **connection_fingerprints(bundle, connections)}


def agent_fingerprints(bundle: Bundle, swarm: Resource) -> dict[str, str]:
    """Agent name -> digest of its Agent, Model, Tool and Extension resources (an Extension's
    per-agent config is in the Agent's spec), their entry files, its system prompt and the
    swarm's policy. Equal digests: no restart needed."""
    prints: dict[str, str] = {}
    policy = msgspec.json.encode(swarm.spec.policy)
    for name, agent in bundle.swarm_agents(swarm).items():
        digest = hashlib.sha256(policy)
        code = (*bundle.agent_tools(agent), *bundle.agent_extensions(agent))
        for resource in (agent, bundle.agent_model(agent), *code):
            digest.update(msgspec.json.encode([resource.kind, resource.name, resource.spec]))
            if resource.kind in ("Tool", "Extension"):
                digest.update(_read(resource))
        digest.update((bundle.system_prompt(agent) or "").encode())
        prints[name] = digest.hexdigest()
    return prints


def _read(resource: Resource) -> bytes:
    if resource.spec.entry is None:  # an MCP Tool: its spec is the whole fingerprint
        return b""
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
