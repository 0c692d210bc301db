"""A diagnostic, not a figure: one agent's turn, in this process, on warm and on cold caches.

    .venv/bin/python -m bench.turn_cold [--turns N] [--evict MIB ...] [--stride BYTES]

Runs `run_turn` (the product's turn: the scripted model answering at once, the conversation
written to a file, runtime events, written in batches as an agent writes them) `--turns` times
per arm, a new conversation every tenth turn as in figures 7 and 14, its state on a tmpfs when
there is one. Before each turn of an arm, `MIB` MiB of other memory is written to, as the
other processes that run between two turns of an agent at scale do to its caches and TLB; the
arm with 0 is the same turn on warm caches. A byte every `--stride` bytes: 64 (every cache
line) empties the caches and the TLB; 4096 (a byte per page) empties the TLB while touching
few cache lines. Prints each arm's CPU per turn (this thread's, so the eviction is not
counted), p50 and mean over the turns after the first fifth.

At 1,000 agents on 2 cores an agent's turn comes once another 199 agents, the orchestrator
and the driver have run, so it meets caches others have emptied: this shows what that costs
the same instructions, in seconds rather than a full scale run (docs/performance.md, figure
14, "Why a turn costs eight times its instructions").
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import uvloop

from agentproc.instance import Instance
from agentproc.providers import make_provider
from agentproc.runtime_events import RuntimeEventLog
from agentproc.tool_registry import ToolRegistry
from agentproc.turn import AgentDefinition, TurnInput, run_turn
from goondan.bundle.model import ModelSpec
from goondan.tools import AgentRuntime

TURNS_PER_CONVERSATION = 10


class _NoPeers:
    """`ctx.agents` of a turn that never asks another agent."""

    async def request(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("the scripted agent asks no one")

    async def send(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("the scripted agent asks no one")

    def catalog(self) -> dict[str, object]:
        return {}


def scripted_agent(name: str, answer: str) -> AgentDefinition:
    """An agent without tools whose scripted model answers `answer` at once."""
    spec = ModelSpec(provider="scripted", model=name, options={"default": answer})
    return AgentDefinition(
        name=name,
        provider=make_provider(spec, None),
        registry=ToolRegistry([]),
        system_prompt="Answer.",
        params={},
        max_steps=4,
    )


async def cpu_per_turn(
    directory: Path, turns: int, evict_mib: int, stride: int = 64
) -> list[float]:
    """Each turn's CPU in µs, with a byte every `stride` of `evict_mib` MiB written to before
    it."""
    other = bytearray(evict_mib * 1024 * 1024)

    def evict(n: int) -> None:
        for i in range(0, len(other), stride):
            other[i] = n & 0xFF

    spent = await run_turns(directory, turns, evict)
    return spent[turns // 5 :]


async def run_turns(directory: Path, turns: int, before: Callable[[int], None]) -> list[float]:
    """`turns` turns of the scripted agent, `before(n)` called before turn `n`; each turn's
    CPU in µs (this thread's, `before` not counted)."""
    agent = scripted_agent("cold", "pong")
    runtime: AgentRuntime = _NoPeers()  # type: ignore[assignment]
    events = RuntimeEventLog(directory)  # the agent's, every instance's
    instances: dict[str, Instance] = {}
    spent: list[float] = []
    for n in range(turns):
        key = f"k{n // TURNS_PER_CONVERSATION}"
        instance = instances.get(key)
        if instance is None:
            instance = Instance(key, directory / key / "cold", events=events)
            instances[key] = instance.load()
        before(n)
        turn = TurnInput("ping", key, "0" * 32, "agent:bench", request_id=f"r{n}")
        started = time.thread_time_ns()
        await run_turn(agent, instance, turn, runtime, directory / key / "work")
        events.write_if_due()  # as the agent does once it has answered
        spent.append((time.thread_time_ns() - started) / 1000)
    for instance in instances.values():
        instance.close()
    events.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.turn_cold",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--turns", type=int, default=2000, help="per arm (default: 2000)")
    parser.add_argument(
        "--evict",
        type=int,
        nargs="+",
        default=[0, 2, 16],
        metavar="MIB",
        help="MiB written to before each turn, one arm each (default: 0 2 16)",
    )
    parser.add_argument(
        "--stride",
        type=int,
        default=64,
        metavar="BYTES",
        help="a byte written every BYTES (default: 64, every cache line; 4096: every page)",
    )
    args = parser.parse_args()
    if args.turns < 5:  # the first fifth is not counted: at least one turn must be
        parser.error(f"--turns must be 5 or more, not {args.turns}")
    if args.stride < 1:
        parser.error(f"--stride must be 1 or more, not {args.stride}")
    if min(args.evict) < 0:
        parser.error(f"--evict takes MiB, 0 or more, not {min(args.evict)}")
    shm = Path("/dev/shm")
    for mib in args.evict:
        with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
            spent = uvloop.run(cpu_per_turn(Path(tmp), args.turns, mib, args.stride))
        print(
            f"{mib:3d} MiB written (a byte every {args.stride}) before each turn: CPU per turn p50 "
            f"{statistics.median(spent):6.1f} us, mean {statistics.fmean(spent):6.1f} us"
        )


if __name__ == "__main__":
    main()
