"""The soak's count: a journaled input whose turn finished after a crash cut the
coordinator's own tool call short is answered, not lost (tools run at most once)."""

from pathlib import Path

from agentproc.conversation import Conversation
from agentproc.messages import Message, ToolCall
from bench.soak_bundle import LedgerLine, coordinator_turns
from bench.soak_load import Request
from bench.soak_report import classify


def coordinator_turn(root: Path, key: str, request_id: str, *, cut: bool) -> None:
    """A coordinator turn as the scripted model writes it; its ledger call is interrupted
    (`cut`, as the loader answers a call left without a result), or answered."""
    convo = Conversation(root / "swarms/default/instances" / key / "coordinator")
    convo.load()
    call = ToolCall("c1", "ledger__record", f'{{"id": "{request_id}", "role": "coordinator"}}')
    result = '{"status":"error","error":{"code":"E_TOOL_INTERRUPTED"}}' if cut else '{"ok":1}'
    for message in (
        Message(id="m1", role="user", content=f"req {request_id}"),
        Message(id="m2", role="assistant", tool_calls=(call,)),
        Message(id="m3", role="tool", content=result, tool_call_id="c1"),
        Message(id="m4", role="assistant", content=f"done {request_id}: recorded {request_id}"),
    ):
        convo.append(message)
    convo.flush()


def interrupted_request(request_id: str, sent_at: float = 0.0) -> Request:
    # the orchestrator died while the client waited
    return Request(request_id, client=0, sent_at=sent_at, generation=0, outcome="interrupted")


def test_a_turn_finished_after_its_tool_was_cut_short_is_answered(tmp_path: Path) -> None:
    coordinator_turn(tmp_path, "soak-c0-1", "r-cut", cut=True)
    coordinator_turn(tmp_path, "soak-c0-2", "r-ran", cut=False)
    turns = coordinator_turns(tmp_path)
    assert set(turns) == {"r-cut", "r-ran"}
    assert turns["r-cut"].cut_short and not turns["r-ran"].cut_short
    assert turns["r-cut"].answered and turns["r-ran"].answered
    requests = [interrupted_request(r) for r in ("r-cut", "r-ran", "r-none")]
    journal = {"r-cut": "j-1", "r-ran": "j-2", "r-none": "j-3"}
    worker = [LedgerLine(r, "worker", 1, "t", 1.0) for r in journal]
    fates = classify(requests, journal, worker, [], turns)
    assert fates.answered == 1 and fates.answered_after_interrupted_tool == 1
    # A turn that claims its tool ran without a ledger line, and one with no answer at all,
    # stay lost: only the conversation's own record of the interruption excuses the ledger.
    assert fates.lost == 2 and set(fates.lost_ids) == {"r-ran", "r-none"}
    assert "journaled as j-2" in fates.lost_details[0]
    assert "coordinator: user:req r-ran | assistant:ledger__record" in fates.lost_details[0]
    assert "no turn stored" in fates.lost_details[1]


def test_a_journaled_input_run_again_once_the_disk_had_room_is_no_duplicate() -> None:
    """The journal delivers a replayed input again after it failed on the full disk; other
    turns of its instance followed it, so it runs again from its input, and its worker's
    tool with it, in the same process: at-least-once by design, as after a crash. The same
    twice with no episode's end between, or for an input never journaled, is a duplicate."""
    requests = [interrupted_request(r, 3.0) for r in ("r-replayed", "r-early", "r-client")]
    journal = {"r-replayed": "j-1", "r-early": "j-2"}
    ledger = [
        LedgerLine("r-replayed", "worker", 7, "t1", 10.0),
        LedgerLine("r-replayed", "worker", 7, "t2", 14.0),  # after the disk had room at 12
        LedgerLine("r-early", "worker", 7, "t3", 4.0),
        LedgerLine("r-early", "worker", 7, "t4", 6.0),  # nothing between
        LedgerLine("r-client", "worker", 7, "t5", 10.0),
        LedgerLine("r-client", "worker", 7, "t6", 14.0),  # never journaled: never replayed
    ]
    fates = classify(requests, journal, ledger, [(1.0, 1.0)], {}, [12.0])  # a crash before
    assert fates.duplicated_turns == 2
    assert sorted(fates.duplicated_ids) == ["r-client", "r-early"]
    crash_only = classify(requests, journal, ledger, [(1.0, 1.0)], {})
    assert sorted(crash_only.duplicated_ids) == ["r-client", "r-early", "r-replayed"]


def test_a_duplicate_is_told_with_its_ledger_lines() -> None:
    """What a reader needs to tell a redelivery from a turn run twice: the client's view,
    whether it was journaled, and every ledger line with its process, time and turn."""
    requests = [interrupted_request("r-twice")]
    ledger = [
        LedgerLine("r-twice", "worker", 7, "t1", 10.0),
        LedgerLine("r-twice", "worker", 7, "t2", 14.0),
    ]
    fates = classify(requests, {}, ledger, [], {})
    assert fates.duplicated_details == [
        "r-twice: client saw interrupted, 0 answers, not journaled; "
        "ledger worker pid 7 at 10.000 turn t1, worker pid 7 at 14.000 turn t2"
    ]


def test_a_worker_run_again_after_its_requester_died_mid_delegate_is_no_duplicate() -> None:
    """A coordinator killed while its delegate ran is redelivered and delegates again: the
    worker's process runs the request twice, and both its lines come after the kill. So is a
    replacement the harness only noticed, given as the span it happened in. A crash before
    the request was sent excuses nothing."""
    requests = [
        interrupted_request("r-killed", 4.0),
        interrupted_request("r-noticed", 4.0),
        interrupted_request("r-before", 4.0),
    ]
    ledger = [
        LedgerLine("r-killed", "worker", 7, "t1", 6.0),
        LedgerLine("r-killed", "worker", 7, "t2", 8.0),
        LedgerLine("r-noticed", "worker", 8, "t3", 21.0),
        LedgerLine("r-noticed", "worker", 8, "t4", 22.0),
        LedgerLine("r-before", "worker", 9, "t5", 31.0),
        LedgerLine("r-before", "worker", 9, "t6", 32.0),
    ]
    crashes = [(1.0, 1.0), (5.0, 5.0), (20.0, 23.5)]  # the last one seen by the sampler
    fates = classify(requests, {}, ledger, crashes, {})
    # r-before's lines come after the span, but the request was sent before it began
    assert fates.duplicated_ids == []
    late = [interrupted_request("r-late", 24.0), interrupted_request("r-before", 4.0)]
    late_lines = [
        LedgerLine("r-late", "worker", 7, "t7", 25.0),
        LedgerLine("r-late", "worker", 7, "t8", 26.0),
        *ledger[4:],
    ]
    fates = classify(late, {}, late_lines, [(1.0, 1.0)], {})
    assert sorted(fates.duplicated_ids) == ["r-before", "r-late"]
