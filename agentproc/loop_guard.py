"""Tool-loop detection, on by default (`Swarm.spec.policy.loopDetection`).

The same call (name and arguments) that keeps returning the same result is a loop: at
`warnAt` repeats the model is told so, at `blockAt` the call is refused without running
(`E_TOOL_LOOP_DETECTED`), at `stopAt` the turn ends. A different result resets the count, so
polling that makes progress is not a loop. Counts are per turn.
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


class _Seen(msgspec.Struct):
    result: bytes = b""
    repeats: int = 0  # calls in a row that gave the same result
    blocked: int = 0


class LoopGuard:
    def __init__(self, policy: LoopDetectionPolicy) -> None:
        self.policy = policy
        self._seen: dict[bytes, _Seen] = {}

    def check(self, name: str, args: dict[str, Any]) -> Verdict:
        """Before a call: run it, refuse it, or refuse it and end the turn."""
        if not self.policy.enabled:
            return "run"
        seen = self._seen.get(_key(name, args))
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

    def record(self, name: str, args: dict[str, Any], result: ToolResult) -> str | None:
        """After a call: the warning to give the model, if this call repeats itself."""
        if not self.policy.enabled:
            return None
        key = _key(name, args)
        digest = hashlib.blake2b(
            _encoder.encode(msgspec.structs.replace(result, details=None)), digest_size=16
        ).digest()
        seen = self._seen.setdefault(key, _Seen())
        if seen.repeats and seen.result == digest:
            seen.repeats += 1
        else:
            seen.result, seen.repeats, seen.blocked = digest, 1, 0
        if seen.repeats >= self.policy.warn_at:
            return (
                f"[loop-detection] You called {name} with the same arguments {seen.repeats} "
                "times in this turn and got the same result each time. Do not call it again "
                "with these arguments: use the result you have, try something different, or "
                "answer the user."
            )
        return None

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
