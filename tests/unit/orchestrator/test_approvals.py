"""The orchestrator's approvals registry: journaled, decided once, expired on time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ipc import wire
from orchestrator.approvals import ApprovalRegistry
from orchestrator.control import CommandError


def request(approval_id: str = "ap-1", timeout_s: float = 60.0) -> wire.ApprovalRequest:
    return wire.ApprovalRequest(approval_id, "k", "bash__exec", '{"cmd":"ls"}', "call-1", timeout_s)


class Outbox:
    def __init__(self, present: bool = True) -> None:
        self.present = present
        self.sent: list[tuple[str, wire.ApprovalDecision]] = []

    def __call__(self, agent: str, frame: bytes) -> bool:
        if self.present:
            env = wire.decode(frame)
            self.sent.append((agent, wire.decode_payload(env, wire.ApprovalDecision)))
        return self.present


async def test_a_decision_goes_to_the_agent_once(tmp_path: Path) -> None:
    outbox = Outbox()
    registry = ApprovalRegistry(tmp_path / "approvals.jsonl", outbox)
    registry.request("solo", request())
    [row] = registry.waiting().approvals
    assert (row.agent, row.instance_key, row.tool, row.args) == (
        "solo",
        "k",
        "bash__exec",
        {"cmd": "ls"},
    )
    decided = registry.decide("denied", wire.DecideArgs("ap-1", "no", "ann (uid 1)"))
    assert (decided.decision, decided.decided_by, decided.reason) == ("denied", "ann (uid 1)", "no")
    assert [(a, d.decision, d.reason) for a, d in outbox.sent] == [("solo", "denied", "no")]
    assert registry.waiting().approvals == []
    with pytest.raises(CommandError):
        registry.decide("approved", wire.DecideArgs("ap-1"))
    registry.close()


async def test_pending_and_decided_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "approvals.jsonl"
    first = ApprovalRegistry(path, Outbox(present=False))
    first.request("solo", request("ap-1"))
    first.request("solo", request("ap-2"))
    first.decide("approved", wire.DecideArgs("ap-2", by="ann"))  # the agent is away
    first.close()
    outbox = Outbox()
    second = ApprovalRegistry(path, outbox)
    assert second.recover() == 1
    assert [a.id for a in second.waiting().approvals] == ["ap-1"]
    second.request("solo", request("ap-2"))  # the resumed turn asks again: told at once
    assert [(d.id, d.decision, d.decided_by) for _, d in outbox.sent] == [
        ("ap-2", "approved", "ann")
    ]
    second.request("solo", request("ap-1"))  # still waiting: nothing yet
    assert len(outbox.sent) == 1
    second.close()


async def test_an_undecided_call_expires(tmp_path: Path) -> None:
    outbox = Outbox()
    registry = ApprovalRegistry(tmp_path / "approvals.jsonl", outbox)
    registry.request("solo", request(timeout_s=0.05))
    await asyncio.sleep(0.2)
    assert [(d.id, d.decision) for _, d in outbox.sent] == [("ap-1", "expired")]
    assert registry.waiting().approvals == []
    registry.close()


async def test_a_withdrawn_call_stops_waiting(tmp_path: Path) -> None:
    outbox = Outbox()
    registry = ApprovalRegistry(tmp_path / "approvals.jsonl", outbox)
    registry.request("solo", request())
    registry.request("other", wire.ApprovalRequest("ap-1", "k", "t", "{}", "c", 1, withdrawn=True))
    assert len(registry.waiting().approvals) == 1  # only its own agent may withdraw it
    registry.request("solo", wire.ApprovalRequest("ap-1", "k", "t", "{}", "c", 1, withdrawn=True))
    assert registry.waiting().approvals == [] and outbox.sent == []
    registry.request("solo", request())  # the same call asking again waits again
    assert len(registry.waiting().approvals) == 1
    registry.close()


def test_the_decider_is_the_connections_user_not_the_clients_claim() -> None:
    import os
    import pwd

    from orchestrator.approvals import with_decider

    claimed = wire.control("deny", wire.DecideArgs("ap-1", "no", "root (uid 0)"))
    command = with_decider(claimed, os.getuid())
    args = wire.decode_args(command, wire.DecideArgs)
    assert args.by == f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"
    assert (args.id, args.reason) == ("ap-1", "no")
    assert with_decider(claimed, None) is claimed  # no credentials: the client's word
