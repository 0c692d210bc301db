"""Spec parser for Connection: which connector feeds which swarm, and how events are routed."""

from __future__ import annotations

from typing import Any

from goondan.bundle.fields import Checker
from goondan.bundle.model import (
    ConnectionSpec,
    IngressMatch,
    IngressRoute,
    IngressRule,
    ValueSource,
)
from goondan.bundle.refs import type_name
from goondan.bundle.spec_agents import SPEC, parse_tool_policy

YPathT = tuple[str | int, ...]


def parse_connection(chk: Checker, spec: Any, name: str | None) -> ConnectionSpec | None:
    allowed = ("connectorRef", "swarmRef", "config", "secrets", "ingress", "toolPolicy")
    data = chk.mapping(SPEC, spec, allowed, ("connectorRef",))
    if data is None:
        return None
    mark = chk.mark()
    connector_ref = None
    if data.get("connectorRef") is not None:
        connector_ref = chk.ref((*SPEC, "connectorRef"), data["connectorRef"], "Connector")
    swarm_ref = None
    if data.get("swarmRef") is not None:
        swarm_ref = chk.ref((*SPEC, "swarmRef"), data["swarmRef"], "Swarm")
    config = _values(chk, (*SPEC, "config"), data.get("config"))
    secrets = _values(chk, (*SPEC, "secrets"), data.get("secrets"))
    rules: list[IngressRule] = []
    if data.get("ingress") is not None:
        ingress = chk.mapping((*SPEC, "ingress"), data["ingress"], ("rules",)) or {}
        path = (*SPEC, "ingress", "rules")
        items = chk.sequence(path, ingress["rules"]) if ingress.get("rules") is not None else []
        for i, item in enumerate(items or []):
            rule = _rule(chk, (*path, i), item)
            if rule is not None:
                rules.append(rule)
    if not chk.clean_since(mark) or connector_ref is None:
        return None
    return ConnectionSpec(
        connector_ref=connector_ref,
        swarm_ref=swarm_ref,
        config=config,
        secrets=secrets,
        ingress_rules=tuple(rules),
        tool_policy=(
            parse_tool_policy(chk, data["toolPolicy"], SPEC)
            if data.get("toolPolicy") is not None
            else None
        ),
    )


def _values(chk: Checker, path: YPathT, value: Any) -> dict[str, ValueSource]:
    """`config` / `secrets`: NAME -> ValueSource."""
    if value is None:
        return {}
    data = chk.mapping(path, value, (), open_keys=True) or {}
    out: dict[str, ValueSource] = {}
    for key, item in data.items():
        source = chk.value_source((*path, key), item)
        if source is not None:
            out[key] = source
    return out


def _rule(chk: Checker, path: YPathT, value: Any) -> IngressRule | None:
    data = chk.mapping(path, value, ("match", "route"))
    if data is None:
        return None
    mark = chk.mark()
    match = IngressMatch()
    if data.get("match") is not None:
        mpath = (*path, "match")
        raw = chk.mapping(mpath, data["match"], ("event", "properties")) or {}
        event = chk.optional_string(raw, mpath, "event")
        props: dict[str, str | int | float | bool] = {}
        if raw.get("properties") is not None:
            for key, prop in (
                chk.mapping((*mpath, "properties"), raw["properties"], (), open_keys=True) or {}
            ).items():
                if isinstance(prop, str | int | float | bool):
                    props[key] = prop
                else:
                    chk.error(
                        (*mpath, "properties", key),
                        f"must be a string, number or boolean, got {type_name(prop)}",
                    )
        match = IngressMatch(event=event, properties=props)
    route = _route(chk, (*path, "route"), data.get("route"))
    if not chk.clean_since(mark):
        return None
    return IngressRule(match=match, route=route)


def _route(chk: Checker, path: YPathT, value: Any) -> IngressRoute:
    if value is None:
        return IngressRoute()
    allowed = ("agentRef", "instanceKey", "instanceKeyProperty", "instanceKeyPrefix")
    data = chk.mapping(path, value, allowed) or {}
    agent_ref = None
    if data.get("agentRef") is not None:
        agent_ref = chk.ref((*path, "agentRef"), data["agentRef"], "Agent")
    key = chk.optional_string(data, path, "instanceKey")
    prop = chk.optional_string(data, path, "instanceKeyProperty")
    prefix = chk.optional_string(data, path, "instanceKeyPrefix")
    if key is not None and prop is not None:
        chk.error(
            path,
            "'instanceKey' and 'instanceKeyProperty' are mutually exclusive",
            "use a fixed instanceKey, or take it from an event property, not both",
        )
    if prefix is not None and prop is None:
        chk.error(
            (*path, "instanceKeyPrefix"),
            "'instanceKeyPrefix' only applies together with 'instanceKeyProperty'",
            "add instanceKeyProperty, or put the prefix into instanceKey",
        )
    return IngressRoute(
        agent_ref=agent_ref,
        instance_key=key,
        instance_key_property=prop,
        instance_key_prefix=prefix,
    )
