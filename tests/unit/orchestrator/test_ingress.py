"""Ingress rules: first match wins; the route picks the agent and the conversation."""

import pytest

from goondan.bundle.model import (
    ConnectionSpec,
    IngressMatch,
    IngressRoute,
    IngressRule,
    ObjectRef,
)
from ipc.wire import ConnectorEvent, ConnectorMessage
from orchestrator.ingress import Route, event_text, route_event

RULES = ConnectionSpec(
    connector_ref=ObjectRef("Connector", "c"),
    ingress_rules=(
        IngressRule(
            IngressMatch(event="deploy", properties={"env": "prod", "urgent": True}),
            IngressRoute(agent_ref=ObjectRef("Agent", "ops"), instance_key=" oncall "),
        ),
        IngressRule(
            IngressMatch(event="message"),
            IngressRoute(instance_key_property="chat_id", instance_key_prefix="tg:"),
        ),
        IngressRule(IngressMatch(properties={"channel": "42"}), IngressRoute()),
    ),
)


def event(name: str, key: str = "own", **props: str) -> ConnectorEvent:
    return ConnectorEvent(name, ConnectorMessage(text="hi"), key, props)


@pytest.mark.parametrize(
    "incoming, expected",
    [
        (event("deploy", env="prod", urgent="true"), Route("ops", "oncall", 0)),
        (event("deploy", env="prod", urgent="false"), None),  # every property must match
        (event("deploy", env="dev", urgent="true"), None),
        (event("message", chat_id="7"), Route("entry", "tg:7", 1)),
        (event("message"), Route("entry", "own", 1)),  # no property: the event's own key
        (event("anything", channel="42"), Route("entry", "own", 2)),  # no event name: any event
        (event("other"), None),  # rules exist and none matches: refused
    ],
)
def test_rules(incoming, expected):
    assert route_event(RULES, "entry", incoming) == expected


def test_a_connection_without_rules_routes_to_the_entry_agent():
    bare = ConnectionSpec(connector_ref=ObjectRef("Connector", "c"))
    assert route_event(bare, "entry", event("x", "k1")) == Route("entry", "k1", None)


def test_non_text_messages_are_flattened():
    image = ConnectorEvent("m", ConnectorMessage("image", text="look", url="http://x/a.png"), "k")
    file = ConnectorEvent("m", ConnectorMessage("file", url="http://x/r.pdf", name="r.pdf"), "k")
    assert event_text(image) == "[image] http://x/a.png\nlook"
    assert event_text(file) == "[file:r.pdf] http://x/r.pdf"
