"""agents.sock's admission rules, on real slots."""

import pytest

from ipc.credential import CREDENTIAL_PROPERTY, new_credential
from orchestrator.supervisor import Slot
from orchestrator.trust import Refused, admit

KEY = new_credential()


def presenting(credential: bytes) -> dict[bytes, bytes]:
    return {CREDENTIAL_PROPERTY: credential, b"Identity": b"a"}


def refusal(slot: Slot | None, properties: dict[bytes, bytes]) -> str:
    with pytest.raises(Refused) as refused:
        admit(slot, properties, KEY)
    return str(refused.value)


def test_only_the_launch_under_way_is_admitted_as_the_slot() -> None:
    slot = Slot("a", "agent")
    slot.credential = first = new_credential()
    admitted = admit(slot, presenting(first), KEY)
    assert admitted.how == "child" and admitted.speaks_for(slot)
    slot.credential = new_credential()  # exited and launched again
    assert not admitted.speaks_for(slot)  # a late `ready` of the old process is not taken
    assert refusal(slot, presenting(first)) == "wrong credential"
    assert refusal(slot, {b"Identity": b"a"}) == "no credential"
    assert refusal(None, presenting(first)) == "not a process of this swarm"


def test_the_operators_key_admits_an_agent_with_no_process_only() -> None:
    slot = Slot("a", "agent")
    admitted = admit(slot, presenting(KEY), KEY)
    assert admitted.how == "external" and admitted.speaks_for(slot)
    slot.credential = new_credential()  # now it has a process of its own
    assert not admitted.speaks_for(slot)
    assert refusal(slot, presenting(KEY)) == "the agent has a process of its own"
    connector = Slot("connection:c", "connector")
    assert refusal(connector, presenting(KEY)).startswith("the operator's key is for agents")
