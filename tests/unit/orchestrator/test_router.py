"""The router's rules, driven directly: every delegate gets exactly one delegate_result."""

import asyncio
import gc

import pytest

from ipc import wire, zmtp
from orchestrator.router import InFlight, Requester, Router


class RecordingOutbox:
    """Stands in for the sockets: records what the router sends and to whom."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.to_agents: list[tuple[str, wire.Envelope]] = []
        self.answers: list[tuple[Requester, wire.Envelope]] = []

    def to_agent(self, name: str, frame: bytes) -> bool:
        if name not in self.running:
            return False
        self.to_agents.append((name, wire.decode(frame)))
        return True

    def to_requester(self, requester: Requester, frame: bytes) -> None:
        self.answers.append((requester, wire.decode(frame)))

    def results(self) -> list[wire.DelegateResult]:
        return [wire.decode_payload(env, wire.DelegateResult) for _, env in self.answers]


@pytest.fixture
def setup():
    outbox = RecordingOutbox()
    started: list[str] = []
    router = Router({"a", "b"}, "a", outbox, started.append)
    return router, outbox, started


def delegate(
    to: str, *, chain=(), timeout_ms=None, cid="c1", sender="a", text="hi"
) -> wire.Envelope:
    payload = wire.Delegate(
        text, "k", wire.Source("agent", sender), call_chain=chain, timeout_ms=timeout_ms
    )
    return wire.decode(wire.encode(wire.DELEGATE, sender, to, payload, correlation_id=cid))


def reply_to(env: wire.Envelope, text: str) -> tuple[wire.Envelope, str]:
    """The target's answer to forwarded request `env`, and who sends it (the target)."""
    result = wire.DelegateResult("ok", env.to, text)
    frame = wire.encode(
        wire.DELEGATE_RESULT, env.to, env.from_, result, correlation_id=env.correlation_id
    )
    return wire.decode(frame), env.to


async def test_delegate_to_a_stopped_agent_starts_it_and_waits(setup):
    router, outbox, started = setup
    requester = Requester("agent", b"a", "c1")
    router.delegate(requester, delegate("b", chain=("a",)))
    assert started == ["b"] and outbox.to_agents == []
    outbox.running.add("b")
    router.agent_ready("b")
    [(name, forwarded)] = outbox.to_agents
    assert name == "b" and forwarded.from_ == "a" and forwarded.correlation_id != "c1"
    router.result(*reply_to(forwarded, "pong"))
    [(who, answer)] = outbox.answers
    assert who == requester and answer.correlation_id == "c1"
    assert outbox.results()[0].response == "pong"
    assert router.pending == {}


async def test_unknown_agent_is_answered_with_agent_not_found(setup):
    router, outbox, started = setup
    router.delegate(Requester("agent", b"a", "c9"), delegate("nobody"))
    [result] = outbox.results()
    assert result.error.code == "AGENT_NOT_FOUND"
    assert "a, b" in result.error.message
    assert outbox.answers[0][1].correlation_id == "c9" and started == []


async def test_circular_call_names_the_whole_chain(setup):
    router, outbox, _ = setup
    router.delegate(Requester("agent", b"b", "c1"), delegate("a", chain=("a", "b"), sender="b"))
    [result] = outbox.results()
    assert result.error.code == "CIRCULAR_CALL_DETECTED"
    assert result.error.message == "Circular call detected: a -> b -> a"


async def test_a_request_over_the_message_limit_is_answered_not_forwarded(setup):
    """The agent's reader would drop the connection on reading its length."""
    router, outbox, started = setup
    outbox.running.add("b")
    router.agent_ready("b")
    huge = "x" * zmtp.MAX_MESSAGE_BYTES
    router.delegate(Requester("agent", b"a", "c1"), delegate("b", chain=("a",), text=huge))
    [result] = outbox.results()
    assert result.error.code == "MESSAGE_TOO_LARGE"
    assert "67,108,864-byte limit" in result.error.message
    assert outbox.to_agents == [] and started == [] and router.pending == {}
    router.delegate(Requester("agent", b"a", "c2"), delegate("b", chain=("a",), cid="c2"))
    assert [name for name, _ in outbox.to_agents] == ["b"]  # the next one goes through


async def test_a_result_from_an_agent_the_request_did_not_go_to_is_dropped(setup):
    router, outbox, _ = setup
    outbox.running.add("b")
    router.agent_ready("b")
    requester = Requester("control", b"cli", "1")
    router.delegate(requester, delegate("b"))
    forwarded = outbox.to_agents[0][1]
    forged, _ = reply_to(forwarded, "forged")
    router.result(forged, "a")  # `a` knows the id, but the request went to `b`
    assert outbox.answers == []
    router.result(*reply_to(forwarded, "real"))
    assert [r.response for r in outbox.results()] == ["real"]


async def test_timeout_answers_once_and_drops_the_late_reply(setup):
    router, outbox, _ = setup
    outbox.running.add("b")
    router.agent_ready("b")
    router.delegate(Requester("agent", b"a", "c1"), delegate("b", chain=("a",), timeout_ms=20))
    await asyncio.sleep(0.06)
    [result] = outbox.results()
    assert result.error.code == "AGENT_REQUEST_TIMEOUT"
    assert "20ms" in result.error.message
    router.result(*reply_to(outbox.to_agents[0][1], "too late"))
    assert len(outbox.answers) == 1


async def test_each_request_times_out_on_its_own_timeout(setup):
    router, outbox, _ = setup
    outbox.running.add("b")
    router.agent_ready("b")
    router.delegate(Requester("agent", b"a", "long"), delegate("b", timeout_ms=5_000, cid="long"))
    router.delegate(Requester("agent", b"a", "short"), delegate("b", timeout_ms=20, cid="short"))
    router.delegate(Requester("agent", b"a", "done"), delegate("b", timeout_ms=10, cid="done"))
    router.result(*reply_to(outbox.to_agents[2][1], "answered in time"))
    await asyncio.sleep(0.08)
    answered = [(requester.correlation_id, env) for requester, env in outbox.answers]
    assert [cid for cid, _ in answered] == ["done", "short"]
    short = wire.decode_payload(answered[1][1], wire.DelegateResult)
    assert short.error is not None and short.error.code == "AGENT_REQUEST_TIMEOUT"
    assert list(router.pending.values())[0].requester.correlation_id == "long"


async def test_a_reused_request_id_is_not_timed_out_by_the_request_before(setup):
    router, outbox, _ = setup
    outbox.running.add("b")
    router.agent_ready("b")
    requester = Requester("replay", b"journal", None)
    router.delegate(requester, delegate("b", timeout_ms=20), "old-7")
    router.result(*reply_to(outbox.to_agents[0][1], "first"))
    router.delegate(requester, delegate("b", timeout_ms=5_000), "old-7")  # replayed again
    await asyncio.sleep(0.06)
    assert len(outbox.answers) == 1  # the first answer only: the second request is still open
    assert "old-7" in router.pending


async def test_an_answered_request_is_freed_at_once(setup):
    """Its deadline stays in the timeout heap until it passes or the heap is rebuilt; the
    request itself must not stay with it: kept alive, thousands of answered requests moved
    into the garbage collector's older generations, whose collections paused routing."""
    router, outbox, _ = setup
    outbox.running.add("b")
    router.agent_ready("b")
    for i in range(50):
        cid = f"freed-{i}"
        router.delegate(Requester("agent", b"a", cid), delegate("b", cid=cid))
        router.result(*reply_to(outbox.to_agents[-1][1], "pong"))
    assert len(outbox.results()) == 50 and router.pending == {}
    alive = [
        o
        for o in gc.get_objects()
        if type(o) is InFlight and (o.requester.correlation_id or "").startswith("freed-")
    ]
    assert alive == []


async def test_crash_redelivers_once_then_fails_with_agent_crashed(setup):
    router, outbox, started = setup
    outbox.running.add("b")
    router.agent_ready("b")
    router.delegate(Requester("agent", b"a", "c1"), delegate("b", chain=("a",)))
    assert len(outbox.to_agents) == 1
    assert router.agent_gone("b", "E_AGENT_CRASHED", "b crashed") is True  # work waits
    router.agent_ready("b")
    assert len(outbox.to_agents) == 2
    first, second = outbox.to_agents
    assert first[1].correlation_id == second[1].correlation_id  # the same request, again
    assert outbox.answers == []
    router.agent_gone("b", "E_AGENT_CRASHED", "b crashed again")
    [result] = outbox.results()
    assert result.error.code == "E_AGENT_CRASHED"
    assert router.pending == {}


async def test_requests_queued_before_ready_keep_their_order(setup):
    router, outbox, _ = setup
    for i in range(5):
        router.delegate(Requester("control", b"cli", str(i)), delegate("b", cid=str(i)))
    outbox.running.add("b")
    router.agent_ready("b")
    sent_ids = [int(env.correlation_id.rsplit("-", 1)[1]) for _, env in outbox.to_agents]
    assert sent_ids == sorted(sent_ids) and len(sent_ids) == 5


async def test_start_failure_answers_everyone_waiting(setup):
    router, outbox, _ = setup
    router.delegate(Requester("control", b"cli", "1"), delegate("b"))
    router.delegate(Requester("control", b"cli", "2"), delegate("b", cid="2"))
    router.fail_waiting("b", "E_AGENT_START", "bad tool module")
    assert [r.error.code for r in outbox.results()] == ["E_AGENT_START"] * 2


async def test_empty_target_goes_to_the_entry_agent(setup):
    router, outbox, started = setup
    router.delegate(Requester("control", b"cli", "1"), delegate(""))
    assert started == ["a"]


async def test_a_reused_request_id_is_kept(setup):
    router, outbox, _ = setup
    outbox.running.add("b")
    router.agent_ready("b")
    assert router.delegate(Requester("replay", b"journal", None), delegate("b"), "old-7") == "old-7"
    assert outbox.to_agents[0][1].correlation_id == "old-7"


def settling(on_settled, *, measure: bool = False) -> tuple[Router, RecordingOutbox]:
    """A router telling `on_settled` of each settled request, agent b running and ready."""
    outbox = RecordingOutbox()
    router = Router({"a", "b"}, "a", outbox, lambda name: None, on_settled, measure=measure)
    outbox.running.add("b")
    router.agent_ready("b")
    return router, outbox


async def test_settled_requests_are_reported_once():
    settled: list[tuple[str, str]] = []
    router, outbox = settling(lambda p, outcome: settled.append((p.oid, outcome)))
    oid = router.delegate(Requester("control", b"cli", "1"), delegate("b"))
    router.result(*reply_to(outbox.to_agents[0][1], "ok"))
    router.result(*reply_to(outbox.to_agents[0][1], "again"))
    assert settled == [(oid, "ok")]


@pytest.mark.parametrize("timeout_ms", [-5, 0])
async def test_a_request_with_a_time_limit_that_is_not_positive_is_refused(setup, timeout_ms):
    router, outbox, started = setup
    outbox.running.add("b")
    router.agent_ready("b")
    requester = Requester("control", b"cli", "c1")
    assert router.delegate(requester, delegate("b", timeout_ms=timeout_ms)) is None
    [result] = outbox.results()
    assert result.status == "error" and result.error is not None
    assert "timeoutMs" in result.error.message
    assert outbox.to_agents == [] and router.pending == {}


async def test_measured_requests_settle_timed_with_their_answers_status():
    finished: list[tuple[str, str, bool]] = []
    router, outbox = settling(
        lambda request, outcome: finished.append((request.target, outcome, request.started > 0)),
        measure=True,  # `--metrics`
    )
    router.delegate(Requester("agent", b"a", "c1"), delegate("b", cid="c1"))
    router.result(*reply_to(outbox.to_agents[-1][1], "pong"))
    router.delegate(Requester("agent", b"a", "c2"), delegate("b", cid="c2"))
    forwarded = outbox.to_agents[-1][1]
    failed = wire.DelegateResult("error", "b", error=wire.ErrorInfo("E_X", "no"))
    frame = wire.encode(
        wire.DELEGATE_RESULT, "b", "a", failed, correlation_id=forwarded.correlation_id
    )
    router.result(wire.decode(frame), "b")
    router.delegate(Requester("agent", b"a", "c3"), delegate("b", cid="c3", timeout_ms=20))
    await asyncio.sleep(0.2)
    router.delegate(Requester("agent", b"a", "c4"), delegate("nobody", cid="c4"))  # not routed
    assert finished == [("b", "ok", True), ("b", "error", True), ("b", "timeout", True)]
