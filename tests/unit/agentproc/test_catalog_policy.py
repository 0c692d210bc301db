"""Tool policies: an agent's, and a Connection's narrowing it for the turns it starts."""

from agentproc.catalog import ToolPolicy
from goondan.bundle.model import ToolPolicySpec


def test_a_connection_policy_narrows_the_agents():
    agent = ToolPolicy(ToolPolicySpec(allow=("bash__*", "calc__*"), deny=("bash__script",)))
    turn = agent.narrowed(ToolPolicySpec(deny=("bash__*",)))
    assert agent.permits("bash__exec") and not turn.permits("bash__exec")
    assert turn.permits("calc__add") and not turn.permits("bash__script")
    assert not turn.permits("http-fetch__get")  # outside the agent's allow list still
    refused = turn.refusal("bash__exec")
    assert refused is not None and refused.error is not None
    assert refused.error.code == "E_TOOL_POLICY_DENIED"
    assert turn.refusal("calc__add") is None


def test_a_connection_policy_cannot_widen():
    agent = ToolPolicy(ToolPolicySpec(allow=("calc__*",)))
    turn = agent.narrowed(ToolPolicySpec(allow=("bash__*", "calc__*")))
    assert not turn.permits("bash__exec") and turn.permits("calc__add")
    open_agent = ToolPolicy()
    assert open_agent.narrowed(ToolPolicySpec()).is_open


def test_a_connection_adds_approvals_and_shortens_their_wait():
    agent = ToolPolicy(
        ToolPolicySpec(require_approval=("bash__*",), approval_timeout_seconds=600.0)
    )
    assert agent.needs_approval("bash__exec") and not agent.needs_approval("calc__add")
    turn = agent.narrowed(
        ToolPolicySpec(require_approval=("calc__add",), approval_timeout_seconds=60.0)
    )
    assert turn.needs_approval("bash__exec") and turn.needs_approval("calc__add")
    assert not turn.needs_approval("calc__sub")
    assert turn.approval_timeout_s == 60.0
    longer = agent.narrowed(ToolPolicySpec(approval_timeout_seconds=7200.0))
    assert longer.approval_timeout_s == 600.0  # a Connection cannot lengthen the wait
    assert ToolPolicy().narrowed(ToolPolicySpec()).approval_timeout_s is None


def test_a_connections_require_approval_reaches_its_turns():
    """What the orchestrator puts in a connector turn's metadata (through the wire's msgpack)
    is the policy the agent applies to that turn."""
    import msgspec

    from agentproc.turn import _turn_policy
    from goondan.bundle.model import ConnectionSpec, ObjectRef
    from ipc import wire
    from orchestrator.connections import _metadata

    spec = ConnectionSpec(
        connector_ref=ObjectRef("Connector", "c"),
        tool_policy=ToolPolicySpec(require_approval=("bash__*",), approval_timeout_seconds=30.0),
    )
    event = wire.ConnectorEvent("message", wire.ConnectorMessage(text="hi"), "k")
    metadata = msgspec.msgpack.decode(msgspec.msgpack.encode(_metadata(spec, event)))
    turn = _turn_policy(ToolPolicy(), metadata["toolPolicy"])
    assert turn.needs_approval("bash__exec") and not turn.needs_approval("calc__add")
    assert turn.approval_timeout_s == 30.0
    assert turn.permits("calc__add")  # it asks for approval; it does not deny
