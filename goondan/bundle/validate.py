"""Checks across resources: unique names, references that resolve, swarm membership, files.

Runs after every document has been parsed on its own (`envelope.py`, `spec_*.py`). References
are resolved with `Bundle.find`, the same lookup the runtime uses, so what validates here is
what resolves at run time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from goondan.bundle import codes
from goondan.bundle.bundle import Bundle
from goondan.bundle.fields import Checker
from goondan.bundle.located import YPath, display_path
from goondan.bundle.model import (
    LOCAL_SCOPE,
    AgentSpec,
    ConnectionSpec,
    ConnectorSpec,
    ObjectRef,
    Resource,
    SwarmSpec,
)
from goondan.bundle.refs import format_ref
from goondan.bundle.suggest import closest


@dataclass
class Draft:
    """A parsed document. `resource.spec` is None when the spec had errors."""

    resource: Resource
    checker: Checker


def drop_duplicates(drafts: list[Draft]) -> list[Draft]:
    """Report a kind+name declared twice in one scope; keep the first declaration."""
    first: dict[tuple[str, str, str], Draft] = {}
    kept: list[Draft] = []
    for draft in drafts:
        res = draft.resource
        key = (res.package, res.kind, res.name)
        earlier = first.get(key)
        if earlier is None:
            first[key] = draft
            kept.append(draft)
            continue
        where = f"{display_path(earlier.resource.source.file)}:{earlier.resource.source.line}"
        scope = "this bundle" if res.package == LOCAL_SCOPE else f"package {res.package}"
        draft.checker.error(
            ("metadata", "name"),
            f"{res.label} is declared twice in {scope}: also at {where}",
            "rename one of them or delete the duplicate",
            codes.DUPLICATE_NAME,
        )
    return kept


def check_all(drafts: list[Draft], bundle: Bundle) -> None:
    """Every cross-resource rule, reported on the drafts' checkers."""
    for draft in drafts:
        _check_refs(draft, bundle)
        spec = draft.resource.spec
        if spec is None:
            continue
        if isinstance(spec, SwarmSpec):
            _check_swarm(draft, spec, bundle)
        elif isinstance(spec, AgentSpec):
            _check_agent(draft, spec, bundle)
        elif isinstance(spec, ConnectionSpec):
            _check_connection(draft, spec, bundle)


# -- references ----------------------------------------------------------------------------------


def _check_refs(draft: Draft, bundle: Bundle) -> None:
    for site in draft.checker.refs:
        if bundle.find(site.ref, draft.resource.package) is not None:
            continue
        scope = f"package {site.ref.package}" if site.ref.package else "this bundle"
        draft.checker.error(
            site.path,
            f"{site.ref.kind}/{site.ref.name} is not declared in {scope}",
            _not_found_hint(site.ref, draft.resource.package, bundle),
            codes.REF_NOT_FOUND,
        )


def _not_found_hint(ref: ObjectRef, from_package: str, bundle: Bundle) -> str:
    same_kind = bundle.of_kind(ref.kind)
    packages = sorted({r.package for r in bundle.resources if r.package != LOCAL_SCOPE})
    known = set(packages) | ({bundle.package_name} if bundle.package_name else set())
    if ref.package and ref.package not in known:
        return (
            f"package {ref.package} is not available: it is not a dependency of this bundle "
            f"(loaded packages: {', '.join(packages) or 'none'}); "
            f"add it: goondan package add {ref.package}"
        )
    for res in same_kind:  # the right name in another scope: say how to reach it
        if res.name == ref.name:
            return f"did you mean {format_ref(_ref_to(res))}?"
    searched = [ref.package] if ref.package else [from_package, LOCAL_SCOPE]
    if ref.package and ref.package == bundle.package_name:
        searched.append(LOCAL_SCOPE)
    names = [r.name for r in same_kind if r.package in searched]
    hit = closest(ref.name, names)
    if hit:
        return f"did you mean {format_ref(ObjectRef(ref.kind, hit, ref.package))}?"
    if names:
        return f"declared {ref.kind}s: {', '.join(sorted(names))}"
    return f"declare a resource with kind: {ref.kind} and metadata.name: {ref.name}"


def _ref_to(res: Resource) -> ObjectRef:
    package = None if res.package == LOCAL_SCOPE else res.package
    return ObjectRef(kind=res.kind, name=res.name, package=package)


def _resolved(bundle: Bundle, refs: Iterable[ObjectRef], scope: str) -> list[Resource | None]:
    return [bundle.find(ref, scope) for ref in refs]


# -- per kind ------------------------------------------------------------------------------------


def _check_swarm(draft: Draft, spec: SwarmSpec, bundle: Bundle) -> None:
    chk, scope = draft.checker, draft.resource.package
    agents = _resolved(bundle, (item.ref for item in spec.agents), scope)
    by_name: dict[str, Resource] = {}
    for i, agent in enumerate(agents):
        if agent is None:
            continue
        other = by_name.get(agent.name)
        if other is not None and other is not agent:  # agents are addressed by name at run time
            chk.error(
                ("spec", "agents", i),
                f"two agents named '{agent.name}' "
                f"({format_ref(_ref_to(other))} and {format_ref(_ref_to(agent))})",
                "agents of one swarm need distinct names",
            )
        by_name.setdefault(agent.name, agent)
    entry = bundle.find(spec.entry_agent, scope)
    if entry is not None and all(entry is not agent for agent in agents):
        listed = ", ".join(item.ref.name for item in spec.agents) or "none"
        chk.error(
            ("spec", "entryAgent"),
            f"entryAgent {entry.label} is not one of the swarm's agents ({listed})",
            f"add {{ref: {format_ref(_ref_to(entry))}}} to spec.agents",
        )


def _check_agent(draft: Draft, spec: AgentSpec, bundle: Bundle) -> None:
    chk, res = draft.checker, draft.resource
    tools = _resolved(bundle, (item.ref for item in spec.tools), res.package)
    by_name: dict[str, Resource] = {}
    for i, tool in enumerate(tools):
        if tool is None:
            continue
        other = by_name.get(tool.name)
        if other is not None and other is not tool:  # both would expose `{name}__{export}`
            chk.error(
                ("spec", "tools", i),
                f"two tools named '{tool.name}' "
                f"({format_ref(_ref_to(other))} and {format_ref(_ref_to(tool))}): "
                "the LLM would see duplicate tool names",
                "keep one of them",
            )
        by_name.setdefault(tool.name, tool)


def _check_connection(draft: Draft, spec: ConnectionSpec, bundle: Bundle) -> None:
    """Rules must match events the connector emits and route to agents of the swarm."""
    chk, scope = draft.checker, draft.resource.package
    connector = bundle.find(spec.connector_ref, scope)
    swarms = _target_swarms(spec, bundle, scope)
    for i, rule in enumerate(spec.ingress_rules):
        path = ("spec", "ingress", "rules", i)
        if connector is not None and rule.match.event is not None:
            _check_event(chk, (*path, "match", "event"), connector, rule.match.event)
        agent_ref = rule.route.agent_ref
        agent = bundle.find(agent_ref, scope) if agent_ref is not None else None
        if agent is None or not swarms:
            continue
        if not any(any(agent is a for a in _swarm_agents(bundle, s)) for s in swarms):
            chk.error(
                (*path, "route", "agentRef"),
                f"{agent.label} is not an agent of {', '.join(s.label for s in swarms)}",
                "route to one of the swarm's agents, or add it to the swarm's agents",
            )


def _check_event(chk: Checker, path: YPath, connector: Resource, event: str) -> None:
    """A rule for an event the connector never emits would silently never match."""
    if not isinstance(connector.spec, ConnectorSpec):
        return
    events = [e.name for e in connector.spec.events]
    if event in events:
        return
    hit = closest(event, events)
    chk.error(
        path,
        f"{connector.label} emits no event '{event}' (it declares: {', '.join(events)})",
        f"did you mean '{hit}'?" if hit else "use one of the declared events",
    )


def _target_swarms(spec: ConnectionSpec, bundle: Bundle, scope: str) -> list[Resource]:
    """The swarm a connection feeds: its swarmRef, or (without one) any local swarm."""
    if spec.swarm_ref is not None:
        swarm = bundle.find(spec.swarm_ref, scope)
        return [swarm] if swarm is not None and swarm.spec is not None else []
    return [s for s in bundle.of_kind("Swarm") if s.package == LOCAL_SCOPE and s.spec is not None]


def _swarm_agents(bundle: Bundle, swarm: Resource) -> list[Resource]:
    agents = _resolved(bundle, (item.ref for item in swarm.spec.agents), swarm.package)
    return [a for a in agents if a is not None]
