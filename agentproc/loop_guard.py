"""Tool-loop detection, on by default (`Swarm.spec.policy.loopDetection`).

Two detectors judge each call on the arguments it is actually executed with (after the
`toolCall` middleware, which may rewrite them):

- **repeat**: the same call (name and arguments) that keeps returning the same result. At
  `warnAt` repeats the model is told so, at `blockAt` the call is refused without running
  (`E_TOOL_LOOP_DETECTED`), at `stopAt` the turn ends. A different result resets the count, so
  polling that makes progress is not a loop.
- **ping-pong** (`pingPong`): two calls that alternate, A, B, A, B, each with the same
  arguments. Counted in calls of the alternation: at `warnAt` the model is told, and when each
  side keeps giving the same result (no progress) the call is refused at `blockAt` and the turn
  ends at `stopAt`.

Counts are per turn.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

from goondan.bundle.model import LoopDetectionPolicy
from goondan.tools import ToolErrorInfo, ToolResult
from ipc.error_codes import ErrorCode

Verdict = Literal["run", "block", "stop"]
_encoder = msgspec.json.Encoder(order="sorted")
_HISTORY = 64  # executed (or refused) calls kept for the ping-pong detector


class _Seen(msgspec.Struct):
    result: bytes = b""
    repeats: int = 0  # calls in a row that gave the same result
    blocked: int = 0


class LoopGuard:
    def __init__(self, policy: LoopDetectionPolicy) -> None:
        self.policy = policy
        self._seen: dict[bytes, _Seen] = {}
        # (call key, result digest) of the calls of this turn, newest last.
        self._history: list[tuple[bytes, bytes]] = []

    def key(self, name: str, args: dict[str, Any]) -> bytes:
        """The call's identity, taken before it runs (its handler may change `args`)."""
        return _key(name, args) if self.policy.enabled else b""

    def check(self, key: bytes) -> Verdict:
        """Before a call, on the arguments it runs with: run it, refuse it, or also end the turn."""
        if not self.policy.enabled:
            return "run"
        verdict = self._repeat_verdict(key)
        if verdict == "run":
            verdict = self._ping_pong_verdict(key)
        if verdict != "run":
            # A refused call still counts as a move of the alternation, with the result its
            # side gave last time, so refusals run on to the stop.
            seen = self._seen.get(key)
            self._remember(key, seen.result if seen is not None else b"")
        return verdict

    def _repeat_verdict(self, key: bytes) -> Verdict:
        seen = self._seen.get(key)
        if seen is None:
            return "run"
        attempt = seen.repeats + seen.blocked + 1
        if attempt >= self.policy.stop_at:
            seen.blocked += 1
            return "stop"
        if seen.repeats + 1 >= self.policy.block_at:
            seen.blocked += 1
            return "block"
        return "run"

    def _ping_pong_verdict(self, key: bytes) -> Verdict:
        pp = self.policy.ping_pong
        if not pp.enabled:
            return "run"
        count, stale = self._alternation(key)
        if not stale:
            return "run"
        if count >= pp.stop_at:
            return "stop"
        if count >= pp.block_at:
            return "block"
        return "run"

    def _alternation(self, key: bytes) -> tuple[int, bool]:
        """How long the alternation is if `key` runs next (0: none), and whether each of its
        two calls gave one same result throughout (no progress)."""
        history = self._history
        if len(history) < 2 or history[-1][0] == key or history[-2][0] != key:
            return 0, False
        other = history[-1][0]
        tail = 0
        results: dict[bytes, bytes] = {}
        stale = True
        for call_key, digest in reversed(history):
            if call_key != (other if tail % 2 == 0 else key):
                break
            if results.setdefault(call_key, digest) != digest:
                stale = False
            tail += 1
        return tail + 1, stale

    def record(self, name: str, key: bytes, result: ToolResult) -> str | None:
        """After a call, on the arguments it ran with: the warning to give the model, if any."""
        if not self.policy.enabled:
            return None
        digest = hashlib.blake2b(
            _encoder.encode(msgspec.structs.replace(result, details=None)), digest_size=16
        ).digest()
        pp = self.policy.ping_pong
        alternation = self._alternation(key)[0] if pp.enabled else 0
        self._remember(key, digest)
        seen = self._seen.setdefault(key, _Seen())
        if seen.repeats and seen.result == digest:
            seen.repeats += 1
        else:
            seen.result, seen.repeats, seen.blocked = digest, 1, 0
        if alternation >= pp.warn_at:
            return (
                f"[loop-detection] Your last {alternation} tool calls alternated between the "
                f"same two calls (the latest: {name}) with the same arguments each time. Stop "
                "going back and forth: use the results you have, try something different, or "
                "answer the user."
            )
        if seen.repeats >= self.policy.warn_at:
            return (
                f"[loop-detection] You called {name} with the same arguments {seen.repeats} "
                "times in this turn and got the same result each time. Do not call it again "
                "with these arguments: use the result you have, try something different, or "
                "answer the user."
            )
        return None

    def _remember(self, key: bytes, digest: bytes) -> None:
        self._history.append((key, digest))
        if len(self._history) > _HISTORY:
            del self._history[: len(self._history) - _HISTORY]

    def blocked(self, name: str) -> ToolResult:
        return ToolResult.fail(
            ToolErrorInfo(
                code=ErrorCode.E_TOOL_LOOP_DETECTED,
                name="ToolLoopError",
                message=f"Not run: {name} was already called with these exact arguments "
                "repeatedly in this turn, with the same result.",
                suggestion="Use the result you already have, change the arguments, or answer.",
            )
        )


def _key(name: str, args: dict[str, Any]) -> bytes:
    try:
        body = _encoder.encode(args)
    except (TypeError, ValueError):
        body = repr(args).encode()
    return name.encode() + b"\0" + body
