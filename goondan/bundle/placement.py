"""Which of a swarm's agents a run places on Ray (`goondan run --placement ray`), from their
`spec.placement` and `spec.resources`. No Ray here: a local run checks its bundle with it at
start and at every reload, and imports nothing of Ray's."""

from __future__ import annotations

from goondan.bundle.bundle import Bundle
from goondan.bundle.model import AgentResources, AgentSpec, Resource


class PlacementError(Exception):
    pass


def ray_agents(bundle: Bundle, swarm: Resource, mode: str) -> dict[str, AgentResources]:
    """The swarm's agents placed on Ray in a run of `mode` ("local" or "ray"), with their
    resources. Raises PlacementError for an agent that asks for Ray in a local run."""
    placed: dict[str, AgentResources] = {}
    for name, agent in bundle.swarm_agents(swarm).items():
        spec: AgentSpec = agent.spec
        where = spec.placement or mode
        if where == "ray" and mode != "ray":
            raise PlacementError(
                f"agent '{name}' has `placement: ray`: run with --placement ray (and a cluster)"
            )
        if where == "ray":
            placed[name] = spec.resources
    return placed
