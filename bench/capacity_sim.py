"""A discrete-event simulation of a swarm of 100,000+ agents routed by one or more
orchestrators, to back the capacity model in docs/scaling.md.

`python -m bench.capacity_sim [--agents 100000] [--shards 1,2,4,8] [--turns-per-hour 30]
[--heartbeat-s 1] [--capacity 42500] [--seconds 120] [--seed 1]`

What is simulated, per agent (each one a state of its own: a queue of inputs, one turn at a
time, as an agent process works):
- user inputs arrive as a Poisson process (`--turns-per-hour` per agent), each measured from
  its arrival at the orchestrator to its answer's delivery;
- a turn is 1 + Geometric(`--tool-step-p`) LLM steps; each LLM call takes a log-normal time
  (median `--llm-median-s`, sigma `--llm-sigma`: a heavy tail as real providers show), each
  tool call between steps a log-normal of median 80 ms; a tool call is a delegation to another
  agent of the same shard with probability `--delegate-p` (its whole turn nested);
- every message crosses the agent's orchestrator: the input and its answer (2), one turn update
  per step (streamed to the requester), and a delegation's request and answer (2 more).

An agent runs its conversations concurrently (as goondan's agents do, one queue per
instance). Each orchestrator is a FIFO server with the measured routing cost (`--capacity` routed
messages/s on one core: `make bench` figure 2, 42.5 k msg/s with 32 agents). Heartbeats are a
fluid load (agents/heartbeat interval messages/s, too many to simulate one by one) that takes
its share of the server first; past 100 % the shard is saturated. Agents are spread evenly over
the shards (a swarm split by agent, each shard with its own orchestrator and state root).
Prints one row per shard count: offered load, utilisation, routing wait and turn latency.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
from dataclasses import dataclass, field


@dataclass
class Shard:
    service_s: float  # per routed message, after the heartbeats' share
    free_at: float = 0.0
    routed: int = 0
    busy_s: float = 0.0
    waits: list[float] = field(default_factory=list)

    def route(self, now: float) -> float:
        """When a message handed to the orchestrator at `now` is delivered (FIFO)."""
        start = max(now, self.free_at)
        self.free_at = start + self.service_s
        self.routed += 1
        self.busy_s += self.service_s
        self.waits.append(self.free_at - now)
        return self.free_at


@dataclass
class Agent:
    shard: int
    turns: int = 0  # under way (an agent runs its conversations concurrently)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def simulate(args: argparse.Namespace, shards: int) -> dict[str, float]:
    rng = random.Random(args.seed)
    per_shard = args.agents / shards
    heartbeat_rate = per_shard / args.heartbeat_s
    heartbeat_share = heartbeat_rate / args.capacity
    if heartbeat_share >= 1:
        return {"shards": shards, "saturated": 1.0, "heartbeatShare": heartbeat_share}
    servers = [Shard(1.0 / args.capacity / (1 - heartbeat_share)) for _ in range(shards)]
    agents = [Agent(i % shards) for i in range(args.agents)]
    by_shard: list[list[int]] = [[] for _ in range(shards)]
    for i, agent in enumerate(agents):
        by_shard[agent.shard].append(i)
    events: list[tuple[float, int, str, int, int]] = []  # (time, seq, kind, agent, turn)
    seq = 0
    turns: dict[int, dict[str, float]] = {}  # turn id -> state
    latencies: list[float] = []
    rate = args.turns_per_hour / 3600.0

    def push(at: float, kind: str, agent: int, turn: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, agent, turn))

    for i in range(args.agents):
        push(rng.expovariate(rate), "input", i, -1)
    next_turn = 0

    def deliver(now: float, a: int, parent: int) -> None:
        """A turn of agent `a` starts (for a user input, or for turn `parent`'s delegation)."""
        nonlocal next_turn
        agents[a].turns += 1
        steps = 1
        while rng.random() < args.tool_step_p:
            steps += 1
        next_turn += 1
        turns[next_turn] = {"arrived": now, "parent": parent, "left": steps, "agent": a}
        push(now + _llm(rng, args), "step", a, next_turn)

    while events:
        now, _, kind, a, turn = heapq.heappop(events)
        if now > args.seconds:
            break
        server = servers[agents[a].shard]
        if kind == "input":
            push(now + rng.expovariate(rate), "input", a, -1)
            deliver(server.route(now), a, -1)  # the input, through the orchestrator
        elif kind == "step":
            state = turns[turn]
            server.route(now)  # its turn update, streamed to the requester
            state["left"] -= 1
            if state["left"] <= 0:
                push(server.route(now), "done", a, turn)  # the answer
            elif rng.random() < args.delegate_p:
                peers = by_shard[agents[a].shard]
                target = peers[rng.randrange(len(peers))]
                deliver(server.route(now), target, turn)  # the delegation's request
            else:
                tool = rng.lognormvariate(math.log(0.08), 1.0)
                push(now + tool + _llm(rng, args), "step", a, turn)
        elif kind == "done":
            state = turns.pop(turn)
            agents[a].turns -= 1
            parent = int(state["parent"])
            if parent < 0:
                latencies.append(now - state["arrived"])
            else:  # the delegating agent's next step starts with this result
                owner = int(turns[parent]["agent"])
                push(now + _llm(rng, args), "step", owner, parent)
    elapsed = min(args.seconds, max((s.free_at for s in servers), default=0.0)) or 1.0
    waits = [w for s in servers for w in s.waits]
    routed = sum(s.routed for s in servers)
    return {
        "shards": shards,
        "saturated": 0.0,
        "agentsPerShard": per_shard,
        "heartbeatShare": heartbeat_share,
        "offeredMsgPerShard": routed / elapsed / shards + heartbeat_rate,
        "utilisation": max(s.busy_s for s in servers) / elapsed * (1 - heartbeat_share)
        + heartbeat_share,
        "waitP50Ms": percentile(waits, 50) * 1e3,
        "waitP99Ms": percentile(waits, 99) * 1e3,
        "turnP50S": percentile(latencies, 50),
        "turnP99S": percentile(latencies, 99),
        "turns": float(len(latencies)),
    }


def _llm(rng: random.Random, args: argparse.Namespace) -> float:
    return float(rng.lognormvariate(math.log(args.llm_median_s), args.llm_sigma))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity_sim")
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--shards", default="1,2,4,8")
    parser.add_argument("--turns-per-hour", type=float, default=30.0)
    parser.add_argument("--heartbeat-s", type=float, default=1.0)
    parser.add_argument("--capacity", type=float, default=42_500.0, help="routed msg/s")
    parser.add_argument("--llm-median-s", type=float, default=1.5)
    parser.add_argument("--llm-sigma", type=float, default=0.8)
    parser.add_argument("--tool-step-p", type=float, default=0.5)
    parser.add_argument("--delegate-p", type=float, default=0.2)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(
        f"{args.agents:,} agents, {args.turns_per_hour:g} turns/agent/h, heartbeat "
        f"{args.heartbeat_s:g} s, {args.capacity:,.0f} routed msg/s per orchestrator, "
        f"LLM median {args.llm_median_s:g} s sigma {args.llm_sigma:g}, {args.seconds:g} s"
    )
    header = "shards  agents/shard  msg/s/shard  util   wait p50   wait p99   turn p50  turn p99"
    print(header)
    for shards in (int(s) for s in args.shards.split(",")):
        r = simulate(args, shards)
        if r["saturated"]:
            print(
                f"{shards:>6}  {args.agents / shards:>12,.0f}  saturated: heartbeats alone are "
                f"{r['heartbeatShare']:.0%} of one orchestrator"
            )
            continue
        print(
            f"{shards:>6}  {r['agentsPerShard']:>12,.0f}  {r['offeredMsgPerShard']:>11,.0f}  "
            f"{r['utilisation']:>4.0%}  {r['waitP50Ms']:>7.3f}ms  {r['waitP99Ms']:>7.3f}ms  "
            f"{r['turnP50S']:>7.2f}s  {r['turnP99S']:>7.2f}s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
