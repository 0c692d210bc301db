"""A validated bundle: every resource, looked up by kind, name and package scope."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from goondan.bundle import codes
from goondan.bundle.model import (
    LOCAL_SCOPE,
    AgentSpec,
    ModelSpec,
    ObjectRef,
    PackageSpec,
    Resource,
    SwarmSpec,
)
from goondan.bundle.reading import read_regular_file

REQUIRED_TOOLS_GUARD = ObjectRef("Extension", "required-tools-guard", "@goondan/base")


class Bundle:
    """Resources of a bundle directory plus the packages it depends on (e.g. `@goondan/base`).

    Built only by `load_bundle`, which guarantees every reference resolves.
    """

    def __init__(
        self,
        root: Path,
        resources: list[Resource],
        package_name: str | None,
        package_roots: dict[str, Path] | None = None,
    ) -> None:
        self.root = root
        self.resources = resources
        self.package_name = package_name  # the local Package document's name, if any
        # Directory of every package loaded with the bundle (`@goondan/base` included).
        self.package_roots: dict[str, Path] = package_roots or {}
        self._index: dict[tuple[str, str, str], Resource] = {
            (r.package, r.kind, r.name): r for r in resources
        }
        # Packages each scope declares it depends on: `Tool/bash` then also means
        # `{kind: Tool, name: bash, package: "@goondan/base"}` (its own resources win).
        self._depends: dict[str, tuple[str, ...]] = {
            r.package: tuple(d.name for d in r.spec.dependencies)
            for r in resources
            if r.kind == "Package" and isinstance(r.spec, PackageSpec)
        }
        self.dependencies: tuple[str, ...] = self._depends.get(LOCAL_SCOPE, ())
        # Views an agent process asks for at start, made once: a forked agent that walked
        # every resource would copy the template's pages it touched (a 1,000-agent bundle's
        # resources are megabytes), so it finds them here, built before the fork (`prime`).
        self._by_kind: dict[str, list[Resource]] = {}
        for r in resources:
            self._by_kind.setdefault(r.kind, []).append(r)
        self._swarm_agents: dict[tuple[str, str], Mapping[str, Resource]] = {}
        self._swarm_names: dict[tuple[str, str], tuple[str, ...]] = {}

    def find(self, ref: ObjectRef, from_package: str = LOCAL_SCOPE) -> Resource | None:
        """Resolve a reference: its own `package`, else the referrer's scope, else the local one,
        else the packages the referrer depends on."""
        scopes = [ref.package] if ref.package else [from_package, LOCAL_SCOPE]
        if not ref.package:
            scopes.extend(self._depends.get(from_package, ()))
        if ref.package and ref.package == self.package_name:
            scopes.append(LOCAL_SCOPE)
        for scope in scopes:
            hit = self._index.get((scope, ref.kind, ref.name))
            if hit is not None:
                return hit
        return None

    def resolve(self, ref: ObjectRef, from_package: str = LOCAL_SCOPE) -> Resource:
        hit = self.find(ref, from_package)
        if hit is None:  # load_bundle has checked every ref, so this is a programming error
            raise KeyError(f"unresolved reference {ref}")
        return hit

    def of_kind(self, kind: str) -> list[Resource]:
        return list(self._by_kind.get(kind, ()))

    def local(self, kind: str, name: str) -> Resource | None:
        return self._index.get((LOCAL_SCOPE, kind, name))

    # -- swarm-level views used by the orchestrator and the agent processes ---------------------

    def swarm_names(self) -> list[str]:
        return [r.name for r in self.of_kind("Swarm") if r.package == LOCAL_SCOPE]

    def select_swarm(self, name: str | None) -> Resource:
        """`--swarm NAME`, else the one named `default`, else the only one.

        Raises `LookupError` with a message a user can act on.
        """
        swarms = [r for r in self.of_kind("Swarm") if r.package == LOCAL_SCOPE]
        if name is not None:
            for swarm in swarms:
                if swarm.name == name:
                    return swarm
            known = ", ".join(s.name for s in swarms) or "none"
            raise LookupError(f"no Swarm named '{name}' in {self.root} (swarms: {known})")
        if not swarms:
            raise LookupError(f"{self.root} declares no Swarm: add a `kind: Swarm` resource")
        for swarm in swarms:
            if swarm.name == "default":
                return swarm
        if len(swarms) == 1:
            return swarms[0]
        names = ", ".join(s.name for s in swarms)
        raise LookupError(f"{self.root} declares several swarms ({names}): pick one with --swarm")

    def swarm_agents(self, swarm: Resource) -> Mapping[str, Resource]:
        """Agent name -> Agent resource, in the order the swarm lists them (made once per
        swarm and shared: do not change it)."""
        key = (swarm.package, swarm.name)
        found = self._swarm_agents.get(key)
        if found is None:
            spec: SwarmSpec = swarm.spec
            agents = (self.resolve(item.ref, swarm.package) for item in spec.agents)
            found = self._swarm_agents[key] = {agent.name: agent for agent in agents}
        return found

    def swarm_agent_names(self, swarm: Resource) -> tuple[str, ...]:
        """The swarm's agents' names, sorted (made once per swarm).

        New string objects, made together: the names inside the resources lie one on each of
        their pages, so an agent process that read them all would copy those pages."""
        key = (swarm.package, swarm.name)
        found = self._swarm_names.get(key)
        if found is None:
            names = sorted(self.swarm_agents(swarm))
            found = self._swarm_names[key] = tuple(n.encode().decode() for n in names)
        return found

    def prime(self) -> None:
        """Make the views agent processes ask for (each local swarm's agents and their names)
        now, in the process they are forked from. Only for a loaded (validated) bundle."""
        for swarm in self.of_kind("Swarm"):
            if swarm.package == LOCAL_SCOPE:
                self.swarm_agent_names(swarm)

    def entry_agent(self, swarm: Resource) -> str:
        spec: SwarmSpec = swarm.spec
        return self.resolve(spec.entry_agent, swarm.package).name

    def agent_model(self, agent: Resource) -> Resource:
        spec: AgentSpec = agent.spec
        return self.resolve(spec.model_config.model_ref, agent.package)

    def compaction_model(self, agent: Resource) -> Resource | None:
        """The Model of `Agent.spec.compaction`, if the agent names one."""
        spec: AgentSpec = agent.spec
        if spec.compaction is None:
            return None
        return self.resolve(spec.compaction.model_ref, agent.package)

    def agent_tools(self, agent: Resource) -> list[Resource]:
        spec: AgentSpec = agent.spec
        return [self.resolve(item.ref, agent.package) for item in spec.tools]

    def agent_extensions(self, agent: Resource) -> list[Resource]:
        """The Extensions the agent's process loads: those it lists, plus `@goondan/base`'s
        required-tools guard that `spec.requiredTools` implies (see agentproc.extensions)."""
        spec: AgentSpec = agent.spec
        listed = [self.resolve(item.ref, agent.package) for item in spec.extensions]
        if spec.required_tools and not any(
            r.name == REQUIRED_TOOLS_GUARD.name and r.package == REQUIRED_TOOLS_GUARD.package
            for r in listed
        ):
            guard = self.find(REQUIRED_TOOLS_GUARD)
            if guard is not None:
                listed.append(guard)
        return listed

    def system_prompt(self, agent: Resource) -> str | None:
        """`prompt.system`, or the text of `prompt.systemRef` (read relative to the bundle root)."""
        spec: AgentSpec = agent.spec
        if spec.prompt is None:
            return None
        if spec.prompt.system_ref is not None:
            path = agent.source.root / spec.prompt.system_ref
            return read_regular_file(path, codes.MAX_ENTRY_BYTES).decode("utf-8")
        return spec.prompt.system

    def model_providers(self) -> tuple[str, ...]:
        """Every provider a Model names, its `options.fallbacks` included, sorted: the SDKs
        the swarm's agents may import."""
        found: set[str] = set()
        for model in self.of_kind("Model"):
            spec: ModelSpec = model.spec
            found.add(spec.provider)
            fallbacks = spec.options.get("fallbacks")
            for item in fallbacks if isinstance(fallbacks, list) else ():
                if isinstance(item, dict) and isinstance(item.get("provider"), str):
                    found.add(item["provider"])
        return tuple(sorted(found))

    def model_spec(self, agent: Resource) -> ModelSpec:
        spec: ModelSpec = self.agent_model(agent).spec
        return spec
