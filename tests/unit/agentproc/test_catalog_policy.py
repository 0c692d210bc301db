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
