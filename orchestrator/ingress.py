"""Ingress: which agent and which conversation an event from a connector goes to.

A Connection's rules are tried in order and the first match wins: `match.event` must equal the
event's name and every `match.properties` entry must equal the event's property (compared as
text). The route picks the agent (`agentRef`, default the swarm's entry agent) and the
instanceKey: a fixed `instanceKey`, or `instanceKeyPrefix` + the event's `instanceKeyProperty`,
or else the event's own key. A Connection without rules sends everything to the entry agent; one
with rules refuses an event that matches none (the daemon logs it and tells the connector).
"""

from __future__ import annotations

import msgspec

from goondan.bundle.model import ConnectionSpec, IngressRule
from ipc.wire import ConnectorEvent


class Route(msgspec.Struct, frozen=True):
    agent: str
    instance_key: str
    rule_index: int | None  # None: the default route of a Connection without rules


def route_event(spec: ConnectionSpec, entry_agent: str, event: ConnectorEvent) -> Route | None:
    if not spec.ingress_rules:
        return Route(entry_agent, event.instance_key, None)
    for index, rule in enumerate(spec.ingress_rules):
        if _matches(rule, event):
            agent = rule.route.agent_ref.name if rule.route.agent_ref else entry_agent
            return Route(agent, _instance_key(rule, event), index)
    return None


def _matches(rule: IngressRule, event: ConnectorEvent) -> bool:
    if rule.match.event is not None and rule.match.event != event.name:
        return False
    return all(
        event.properties.get(key) == _as_text(value) for key, value in rule.match.properties.items()
    )


def _instance_key(rule: IngressRule, event: ConnectorEvent) -> str:
    route = rule.route
    if route.instance_key and route.instance_key.strip():
        return route.instance_key.strip()
    if route.instance_key_property:
        value = event.properties.get(route.instance_key_property, "")
        if value:
            return (route.instance_key_prefix or "") + value
    return event.instance_key


def _as_text(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def event_text(event: ConnectorEvent) -> str:
    """The turn's input: the text, or a reference to the image/file (as upstream flattens)."""
    message = event.message
    if message.type == "image":
        return f"[image] {message.url or ''}".strip() + (
            f"\n{message.text}" if message.text else ""
        )
    if message.type == "file":
        label = f"[file:{message.name}]" if message.name else "[file]"
        return f"{label} {message.url or ''}".strip() + (
            f"\n{message.text}" if message.text else ""
        )
    return message.text or ""
