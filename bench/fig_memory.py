"""Figure 4: idle memory per agent, and how many idle agents fit in 10 GiB.

Product: a real `goondan run` daemon with 40 agents, each started by one delegate (so each has
run one turn: an idle agent, not a fresh one), then left idle for a second. The figure is the
sum of the agents' PSS (`/proc/PID/smaps_rollup`, the PIDs from `status`) / 40. Helper processes
below the daemon that are not agents (a template process, if the product has one) are reported
beside it, not hidden: their PSS is added to the total for the "fit in 10 GiB" line.

Baselines, 40 of each, idle: a bare `python -c "import zmq"` process with a connected DEALER,
and a plain `os.fork` child of a helper that has the agent runtime imported.
"""

from __future__ import annotations

import time
from typing import Any

from bench import baselines, product
from bench.harness import Row, log
from bench.procs import descendants, memory_of

NAME = "memory"
COUNT = 40
GOAL_MIB = 10.0
BUDGET_KIB = 10 * 1024 * 1024  # 10 GiB


def _product() -> dict[str, Any]:
    names = [f"m{i}" for i in range(COUNT)]
    with product.driven_run(["driver", *names], entry=names[0]) as (_, daemon, drv):
        log(f"memory: starting {COUNT} product agents")
        payload = product.delegate_payload("ping", "mem", "driver")
        wave = drv.wave([(name, payload) for name in names], timeout_s=120)
        if wave.ok != COUNT:
            raise RuntimeError(f"only {wave.ok} of {COUNT} agents answered")
        time.sleep(1.0)
        drv.beat()
        pids = daemon.agent_pids()
        agent_pids = [pids[n] for n in names if n in pids]
        assert daemon.proc is not None
        others = [p for p in descendants(daemon.proc.pid) if p not in set(pids.values())]
        result = memory_of(agent_pids)
        result["helpers"] = memory_of(others)
        result["orchestrator"] = memory_of([daemon.proc.pid])
    return result


def _baselines() -> dict[str, Any]:
    out: dict[str, Any] = {}
    with baselines.hello_baselines() as (procs, sink, spawner):
        log(f"memory: {COUNT} bare python -c processes")
        _, lat, pids = spawner.spawn(COUNT)
        time.sleep(1.0)
        out["subprocess"] = memory_of(pids)
        spawner.close()
        forker = baselines.Forker(procs, sink)
        log(f"memory: {COUNT} os.fork children")
        _, pids = forker.spawn(COUNT)
        time.sleep(1.0)
        out["fork"] = memory_of(pids)
        out["fork"]["preloaded"] = forker.preloaded
        forker.kill_children(pids)
    return out


def run(quick: bool) -> list[Row]:
    prod = _product()
    base = _baselines()
    per_agent = prod["pssMiBPerProcess"]
    helpers_kib = prod["helpers"]["pssKiBTotal"]
    # Agents that fit: the helpers' memory is paid once, then each agent its PSS.
    fit = (BUDGET_KIB - helpers_kib) / (per_agent * 1024) if per_agent else float("nan")
    sub, fork = base["subprocess"]["pssMiBPerProcess"], base["fork"]["pssMiBPerProcess"]
    note = ""
    if prod["helpers"]["processes"]:
        note = (
            f"{prod['helpers']['processes']} helper process(es) below the daemon, "
            f"PSS {helpers_kib / 1024:.1f} MiB in all"
        )
    details = {"product": prod, **base}
    return [
        Row(
            f"4 idle PSS per agent ({COUNT} agents)",
            "MiB",
            per_agent,
            sub,
            "python -c zmq",
            goal=f"<= {GOAL_MIB:g} MiB",
            judge=lambda p, b, r: p <= GOAL_MIB,
            note=note,
            details=details,
        ),
        Row(
            f"4 idle PSS per agent ({COUNT} agents)",
            "MiB",
            per_agent,
            fork,
            "os.fork",
            goal="(same goal)",
        ),
        Row(
            "4 idle agents that fit in 10 GiB",
            "",
            fit,
            BUDGET_KIB / (sub * 1024),
            "python -c zmq",
            goal="(follows from PSS)",
        ),
    ]
