"""Figure 14: 1,000 agents. 50,000 delegates in waves: lost, p99, and the agents' memory.

Product: a real `goondan run` daemon with 1,000 scripted agents (no tools), started by a first
wave of one delegate to each, all at once (the time until all answered is reported). Then the
agents idle for a second and their memory is read from /proc/PID/smaps_rollup: the idle PSS
per agent (the sum of their PSS / 1,000, as figure 4 measures it at 40 agents; goal <= 7 MiB),
and the sum of their PSS and of their RSS (RSS counts every page they share with the template
once per agent, so it is far above what they use; PSS shares each such page out). The
template's PSS is reported beside them.

Waves: 200 delegates in flight, a fifth of the agents in each wave, so a round of 5 waves
gives every agent one delegate; 2 warm-up rounds (checked, not timed), then 50 rounds: 250
waves, 50,000 delegates. A wave of 200 rather than of 1,000: on 2 cores a wave's answers come
one after another, so a delegate's latency is mostly its place in the wave. With 1,000 in
flight the p99 would be the time the whole wave takes (a throughput, ~1,000 turns end to end),
the same for every delegate in its last percent; with 200 it is a delegate's wait among as
many as figure 7 has in flight, so the two figures read side by side, and what differs is
that 1,000 agents are resident: their memory, caches and the orchestrator's tables and
heartbeats. Every agent moves to a new conversation every 10 rounds, a tenth of them in each
round, as in figure 7. Every answer's content is checked (the agent, its text, the
conversation); lost = sent minus answered `ok` with the right content, in the start wave too,
and a loss makes `python -m bench` exit 1.

Baseline: the same driver and waves through the bare broker (`bench/bare.py`) to 1,000 bare
agents, each its own interpreter (`python -m bench.bare agent`), as figures 1, 2 and 7 start
them; they take over a minute to start and ~15 MiB each. A reported arm runs the same waves to
1,000 bare agents forked from one bare template (`python -m bench.bare swarm`), which has
imported what a bare agent needs: they run the same code, but read the template's pages,
shared by all of them in the caches as in memory (what the product's template gives its own
agents), and use about half the CPU per delegate (docs/performance.md, figure 14). A
diagnostic arm puts the 1,000 forked bare agents behind the real orchestrator (connected to
`agents.sock`, saying `ready`), to split routing's share from the agents' turns'. Both are
left out with `--quick`, which runs 300 agents and 10 rounds.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from bench import baselines, product
from bench.driver import Driver
from bench.fig_scale import (
    Wave,
    bare_wave,
    count_start_wave,
    lost_note,
    monitor_note,
    product_wave,
    run_waves,
)
from bench.harness import Row, log
from bench.procs import PYTHON, Procs, cpu_text, descendants, memory_of, short_tmpdir

NAME = "scale1000"
P99_GOAL_RATIO = 1.3  # of the bare broker's p99 in the same run
PSS_GOAL_MIB = 7.0
IN_FLIGHT = 200  # delegates per wave
WARMUP_ROUNDS = 2
BUDGET_S = 150.0  # per arm's measured waves: they stop early (and say so) past this


def _waves(
    drv: Driver,
    names: list[str],
    rounds: int,
    tag: str,
    pids: list[int],
    *,
    bare: bool,
    router: int,
) -> dict[str, Any]:
    """The warm-up and measured rounds; wave `i` is the `i % per_round`-th slice of
    IN_FLIGHT agents, in the conversations of round `i // per_round`. `router`: the pid of
    the orchestrator or the bare broker, whose CPU is reported beside the agents'."""
    per_round = math.ceil(len(names) / IN_FLIGHT)

    def plan(wave: int) -> Wave:
        rnd, part = divmod(wave, per_round)
        start = part * IN_FLIGHT
        chosen = names[start : start + IN_FLIGHT]
        if bare:
            return bare_wave(chosen, rnd, start)
        return product_wave(chosen, rnd, start=start)

    return run_waves(
        drv,
        plan,
        WARMUP_ROUNDS * per_round,
        rounds * per_round,
        tag,
        pids,
        budget_s=BUDGET_S,
        router=[router],
    )


def _product(names: list[str], rounds: int) -> dict[str, Any]:
    with product.driven_run(["driver", *names], names[0], stop_timeout_s=90) as (
        _,
        daemon,
        drv,
    ):
        log(f"scale1000: product: starting {len(names)} agents")
        started = time.monotonic()
        requests, expected = product_wave(names, 0, timeout_ms=240_000)
        first = drv.wave(requests, 245, expected)
        startup = {"seconds": time.monotonic() - started, "answered": first.ok}
        if first.ok != len(names):
            log(f"scale1000: product: only {first.ok}/{len(names)} agents answered")
        time.sleep(1.0)  # idle, as figure 4 measures it
        drv.beat()
        table = daemon.agent_pids()
        pids = [table[n] for n in names if n in table]
        assert daemon.proc is not None
        agent_set = set(table.values())
        helpers = [p for p in descendants(daemon.proc.pid) if p not in agent_set]
        idle = memory_of(pids)
        helper_pss = memory_of(helpers)["pssMiBSum"]
        daemon_pss = memory_of([daemon.proc.pid])["pssMiBSum"]
        result = _waves(drv, names, rounds, "product", pids, bare=False, router=daemon.proc.pid)
        count_start_wave(result, first, startup, len(names))
        time.sleep(1.0)
        drv.beat()
        result["memoryIdle"] = idle
        result["memoryAfter"] = memory_of(pids)
        result["helpersPssMiB"] = helper_pss
        result["orchestratorPssMiB"] = daemon_pss
    return result


@contextlib.contextmanager
def _bare_swarm(procs: Procs, endpoint: str, names: list[str], *extra: str) -> Iterator[list[int]]:
    """`python -m bench.bare swarm`: the bare agents forked from a bare template; yields their
    pids once every one is forked (the caller waits until each is routable)."""
    reply = product.result_payload("w", "ping", "k0")
    prefix = names[0].rstrip("0123456789")
    proc = procs.spawn(
        [PYTHON, "-m", "bench.bare", "swarm", endpoint, prefix, str(len(names))]
        + ["--result", reply.hex(), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    line = baselines.read_line(proc, 180)
    if line != "up":
        raise RuntimeError(f"the bare swarm did not start: {line!r}")
    yield descendants(proc.pid)


@contextlib.contextmanager
def _bare_agents(
    procs: Procs, endpoint: str, names: list[str], *, forked: bool
) -> Iterator[list[int]]:
    """The bare agents' pids: each its own interpreter (`python -m bench.bare agent`, as
    figures 1, 2 and 7 start them), or forked from one bare template."""
    if forked:
        with _bare_swarm(procs, endpoint, names) as pids:
            yield pids
        return
    reply = product.result_payload("w", "ping", "k0")
    yield [agent.pid for agent in baselines.start_agents(procs, endpoint, names, reply)]


def _bare(names: list[str], rounds: int, *, forked: bool) -> dict[str, Any]:
    tag = "bare, forked" if forked else "bare"
    with short_tmpdir() as tmp, Procs() as procs:
        endpoint = f"ipc://{tmp / 'bare.sock'}"
        broker = baselines.start_broker(procs, endpoint)
        log(f"scale1000: {tag}: starting {len(names)} agents")
        started = time.monotonic()
        with (
            _bare_agents(procs, endpoint, names, forked=forked) as pids,
            Driver(endpoint, "driver") as drv,
        ):
            payload = product.delegate_payload("ping", "start", "driver")
            baselines.wait_routable(drv, names, payload, timeout_s=120)
            startup = {"seconds": time.monotonic() - started, "answered": len(names)}
            result = _waves(drv, names, rounds, tag, pids, bare=True, router=broker.pid)
            result["startup"] = startup
            result["memoryAfter"] = memory_of(pids)
    return result


def _orchestrator_only(names: list[str], rounds: int) -> dict[str, Any]:
    with product.driven_run(["driver", *names], names[0], stop_timeout_s=90) as (
        procs,
        daemon,
        drv,
    ):
        log(f"scale1000: real orchestrator: starting {len(names)} bare agents")
        with _bare_swarm(procs, daemon.agents_endpoint, names, "--product") as pids:
            if not daemon.wait_status(names, {"idle", "processing"}, 120):
                raise RuntimeError("the orchestrator did not take every bare agent's `ready`")
            tag = "real orchestrator + bare agents"
            assert daemon.proc is not None
            return _waves(drv, names, rounds, tag, pids, bare=True, router=daemon.proc.pid)


def _ms(arm: dict[str, Any], key: str = "p50") -> float:
    return float(arm["latencyMs"].get(key, math.nan))


def run(quick: bool) -> list[Row]:
    agents, rounds = (300, 10) if quick else (1000, 50)
    names = [f"w{i}" for i in range(agents)]
    planned = agents * rounds
    prod = _product(names, rounds)
    # The baseline's arm last: the minute after 1,000 interpreters exit is not quiet, and an
    # arm run in it would measure their teardown (docs/performance.md, figure 14).
    forked = None if quick else _bare(names, rounds, forked=True)
    split = None if quick else _orchestrator_only(names, rounds)
    bare = _bare(names, rounds, forked=False)
    idle = prod["memoryIdle"]
    after = prod["memoryAfter"]
    label = f"{agents:,} agents, {prod['sent']:,} delegates"
    series: dict[str, Any] = {
        "figure": NAME,
        "unit": "ms",
        "inFlight": IN_FLIGHT,
        "agents": agents,
    }
    arms = (("product", prod), ("bare", bare), ("bareForked", forked), ("orchestratorOnly", split))
    for key, arm in arms:
        if arm is not None:
            series[key] = arm.pop("perWaveMs")
    rows = [
        Row(
            f"14 scale {label}: lost",
            "",
            prod["lost"],
            bare["lost"],
            "bare broker",
            goal="0",
            judge=lambda p, b, r: p == 0,
            note=lost_note(prod, planned) if prod["lost"] or prod["sent"] < planned else "",
            correctness=True,
            details={
                "product": prod,
                "bare": bare,
                "bareForked": forked,
                "orchestratorOnly": split,
                "agents": agents,
                "rounds": rounds,
                "inFlight": IN_FLIGHT,
                "series": series,
            },
        ),
        Row(
            f"14 scale {label}: p99",
            "ms",
            prod["p99"],
            bare["p99"],
            "bare broker",
            goal=f"<= {P99_GOAL_RATIO:g}x bare",
            judge=lambda p, b, r: r is not None and r <= P99_GOAL_RATIO,
            note=f"{IN_FLIGHT} in flight; p50 {_ms(prod):.1f} ms (bare {_ms(bare):.1f} ms); "
            f"agents' CPU per delegate {cpu_text(prod['agentsCpu'])}, bare agents "
            f"{cpu_text(bare['agentsCpu'])}; the orchestrator's "
            f"{prod['routerCpu']['cpuUs']:.0f} us, the bare broker's "
            f"{bare['routerCpu']['cpuUs']:.0f} us"
            + monitor_note(("product", prod), ("bare", bare)),
        ),
    ]
    if forked is not None:
        rows.append(
            Row(
                "14 scale p99, bare agents forked from a template",
                "ms",
                prod["p99"],
                forked["p99"],
                "bare broker",
                goal="(reported)",
                note=f"p50 {_ms(forked):.1f} ms; the forked bare agents' CPU per delegate "
                f"{cpu_text(forked['agentsCpu'])}; the bare broker's "
                f"{forked['routerCpu']['cpuUs']:.0f} us" + monitor_note(("forked bare", forked)),
            )
        )
    if split is not None:
        rows.append(
            Row(
                f"14 scale p99, real orchestrator + {agents:,} bare agents",
                "ms",
                split["p99"],
                bare["p99"],
                "bare broker",
                goal="(diagnostic)",
                note=f"the orchestrator's CPU per delegate {split['routerCpu']['cpuUs']:.0f} us"
                + (f"; lost {split['lost']}" if split["lost"] else ""),
            )
        )
    forked_pss = forked_startup = ""
    if forked is not None:  # the same figures for the bare agents forked from a template
        forked_pss = f"; bare agents forked: PSS {forked['memoryAfter']['pssMiBSum']:,.0f} MiB"
        forked_startup = f"bare agents forked from a template {forked['startup']['seconds']:.2f} s"
    rows += [
        Row(
            f"14 idle PSS per agent ({agents:,} agents)",
            "MiB",
            idle["pssMiBPerProcess"],
            None,
            goal=f"<= {PSS_GOAL_MIB:g} MiB",
            judge=lambda p, b, r: p <= PSS_GOAL_MIB,
            note=f"after one turn and 1 s idle, {idle['measured']} agents; "
            f"{after['pssMiBPerProcess']:.2f} MiB after the waves; template and helpers "
            f"{prod['helpersPssMiB']:.1f} MiB, orchestrator {prod['orchestratorPssMiB']:.1f} MiB",
        ),
        Row(
            f"14 agents' memory in all ({agents:,} agents), PSS",
            "MiB",
            after["pssMiBSum"],
            bare["memoryAfter"]["pssMiBSum"],
            "bare agents",
            goal="(reported)",
            note=f"RSS summed over the agents {after['rssMiBSum']:,.0f} MiB (bare "
            f"{bare['memoryAfter']['rssMiBSum']:,.0f}), counting the pages they share once "
            f"per agent; idle, after one turn: PSS {idle['pssMiBSum']:,.0f} MiB, RSS "
            f"{idle['rssMiBSum']:,.0f} MiB{forked_pss}",
        ),
        Row(
            f"14 scale: {agents:,} cold agents started and answering",
            "s",
            prod["startup"]["seconds"],
            bare["startup"]["seconds"],
            "bare agents",
            goal="(reported)",
            note=forked_startup,
        ),
    ]
    return rows
