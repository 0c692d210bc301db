"""Figure 7: scale. 200 agents, 10,000 delegates in flight in waves: completed, lost, p99.

Product: a real `goondan run` daemon with 200 scripted agents (no tools), started by a first
wave of one delegate each (the time until all 200 answered is reported too). Then 50 waves: each
wave sends one delegate to every agent at once (200 in flight) and waits for all the answers
before the next; 50 x 200 = 10,000 delegates. Every agent moves to a new conversation (instance
key) every 10 waves, a tenth of the agents in each wave, as new conversations arrive over time
in a real daemon; so a conversation holds at most 20 messages. Latency is per delegate, from
the driver's send to its answer. Before the measured waves, 10 warm-up waves (one round of
conversations) let every process take its one-time costs (first turn, first conversation);
their delegates are checked for losses too but not timed. Lost = sent minus answered `ok` (no
answer at all, or an error answer; the note splits them). Baseline: the same driver and waves
through the bare broker to 200 bare agents.

A wave's slowest answer (when the wave ended), median and worst over the measured waves, is
in the note: p99 is about the worst waves, and this tells a run whose every wave was slow (a
slow moment of the machine, whose speed moves by a quarter within minutes, or a slower product)
from one with a few slow waves.

The agents' CPU time over the measured waves (user and kernel, from /proc) is reported per
delegate beside the bare agents': the kernel share tells a run that paid for the filesystem
(on ext4 without a journal, creating a conversation's directory and files costs ten times its
usual for some minutes after thousands of files were deleted, as the bench's last exit did)
from a run that did not.

A third arm splits the product's p99: the real orchestrator with the 200 bare agents (connected
to `agents.sock`, saying `ready`), so routing's share and the agents' turns' share can be read
apart, as in figure 1. A fourth runs the product again with its state root on a tmpfs
(/dev/shm), where there is one: the disk's share, read apart in the same run. On this machine's
ext4 (no journal) the inode allocator skips, at a cost each, every inode freed in the last one
to six minutes (a test run's or the bench's last cleanup), and the agents' new conversations
pay it: measured, a wave's median 44 against 29 ms on tmpfs right after a deletion, 31 on a
quiet disk. The goal is judged on the disk arm, as the product runs.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from bench import baselines, product
from bench.driver import Driver, WaveResult
from bench.harness import Row, log, percentile, summary
from bench.procs import (
    Procs,
    cpu_seconds,
    memory_filesystem,
    short_tmpdir,
    wait_for_quiet_disk,
)

NAME = "scale"
P99_GOAL_MS = 50.0
WAVE_TIMEOUT_S = 60.0
WARMUP_WAVES = 10
BUDGET_S = 240.0  # per arm, after start-up: waves stop early (and say so) past this


def _conversation(agent: int, wave: int) -> str:
    """The instance key agent `agent` uses in `wave`: a new one every 10 waves, with the agents'
    moves spread over the waves (a tenth of them in each)."""
    return f"k{(wave + agent % 10) // 10}"


def _payloads(names: list[str], wave: int, timeout_ms: int = 60_000) -> list[tuple[str, bytes]]:
    return [
        (name, product.delegate_payload("ping", _conversation(i, wave), "driver", timeout_ms))
        for i, name in enumerate(names)
    ]


def _waves(drv: Driver, names: list[str], waves: int, tag: str, pids: list[int]) -> dict[str, Any]:
    """The warm-up and measured waves; `pids` are the agents' processes, whose CPU time over
    the measured waves is reported per delegate."""
    warm = WaveResult()
    for wave in range(WARMUP_WAVES):
        result = drv.wave(_payloads(names, wave), WAVE_TIMEOUT_S)
        warm.ok += result.ok
    warmup = {"sent": WARMUP_WAVES * len(names), "completed": warm.ok}
    total = WaveResult()
    sent = 0
    slowest_ms: list[float] = []  # each wave's slowest answer: how long the wave took
    wave_p50: list[float] = []  # each wave's p50 and p99, for the picture (bench/plots.py)
    wave_p99: list[float] = []
    user_before, system_before = cpu_seconds(pids)
    started = time.monotonic()
    requests = [_payloads(names, WARMUP_WAVES + wave) for wave in range(waves)]
    for wave in range(waves):
        if time.monotonic() - started > BUDGET_S:
            log(f"scale: {tag}: time budget spent after {wave} waves")
            break
        result = drv.wave(requests[wave], WAVE_TIMEOUT_S)
        sent += len(names)
        total.ok += result.ok
        total.lost += result.lost
        total.latencies_s.extend(result.latencies_s)
        slowest_ms.append(max(result.latencies_s, default=math.nan) * 1000)
        wave_p50.append(round(percentile(result.latencies_s, 50) * 1000, 2))
        wave_p99.append(round(percentile(result.latencies_s, 99) * 1000, 2))
        for code, count in result.errors.items():
            total.errors[code] = total.errors.get(code, 0) + count
        if (wave + 1) % 10 == 0:
            log(f"scale: {tag}: {wave + 1}/{waves} waves")
    seconds = time.monotonic() - started
    user, system = cpu_seconds(pids)
    per_delegate_us = 1e6 / max(sent, 1)
    ms = [x * 1000 for x in total.latencies_s]
    return {
        "sent": sent,
        "completed": total.ok,
        "noAnswer": total.lost,
        "errorAnswers": total.errors,
        "lost": sent - total.ok + warmup["sent"] - warmup["completed"],
        "warmup": warmup,
        "latencyMs": summary(ms),
        "p99": percentile(ms, 99),
        "waveSlowestAnswerMs": summary(slowest_ms),
        "perWaveMs": {"p50": wave_p50, "p99": wave_p99},
        "seconds": seconds,
        "agentsUserUs": (user - user_before) * per_delegate_us,
        "agentsSystemUs": (system - system_before) * per_delegate_us,
    }


def _product(
    names: list[str], waves: int, under: Path | None = None, tag: str = "product"
) -> dict[str, Any]:
    """The product's arm, its state root in a temp dir in `under` (or the system's)."""
    with product.driven_run(["driver", *names], names[0], stop_timeout_s=60, under=under) as (
        _,
        daemon,
        drv,
    ):
        log(f"scale: {tag}: starting {len(names)} agents")
        started = time.monotonic()
        # in the conversations the first wave goes on with
        first = drv.wave(_payloads(names, 0, timeout_ms=180_000), timeout_s=185)
        startup = {
            "seconds": time.monotonic() - started,
            "answered": first.ok,
            "errors": first.errors,
            "lost": first.lost,
        }
        if first.ok != len(names):
            log(f"scale: {tag}: only {first.ok}/{len(names)} agents answered")
        pids = [pid for name, pid in daemon.agent_pids().items() if name in names]
        result = _waves(drv, names, waves, tag, pids)
        result["startup"] = startup
    return result


def _orchestrator_only(names: list[str], waves: int) -> dict[str, Any]:
    with product.driven_run(["driver", *names], names[0], stop_timeout_s=60) as (
        procs,
        daemon,
        drv,
    ):
        log(f"scale: real orchestrator: starting {len(names)} bare agents")
        reply = product.result_payload("w", "ping", "k0")
        agents = baselines.start_agents(procs, daemon.agents_endpoint, names, reply, "--product")
        if not daemon.wait_status(names, {"idle", "processing"}, 60):
            raise RuntimeError("the orchestrator did not take every bare agent's `ready`")
        pids = [agent.pid for agent in agents]
        return _waves(drv, names, waves, "real orchestrator + bare agents", pids)


def _bare(names: list[str], waves: int) -> dict[str, Any]:
    with short_tmpdir() as tmp, Procs() as procs:
        endpoint = f"ipc://{tmp / 'bare.sock'}"
        baselines.start_broker(procs, endpoint)
        log(f"scale: bare: starting {len(names)} agents")
        started = time.monotonic()
        reply = product.result_payload("w", "ping", "k0")
        agents = baselines.start_agents(procs, endpoint, names, reply)
        with Driver(endpoint, "driver") as drv:
            payload = product.delegate_payload("ping", "start", "driver")
            baselines.wait_routable(drv, names, payload, timeout_s=60)
            startup = {"seconds": time.monotonic() - started, "answered": len(names)}
            result = _waves(drv, names, waves, "bare", [agent.pid for agent in agents])
            result["startup"] = startup
    return result


def _waves_ms(arm: dict[str, Any]) -> str:
    slowest = arm["waveSlowestAnswerMs"]
    return f"median {slowest.get('p50', math.nan):.1f}, worst {slowest.get('max', math.nan):.1f} ms"


def _cpu(arm: dict[str, Any]) -> str:
    return f"{arm['agentsUserUs']:.0f} us user + {arm['agentsSystemUs']:.0f} us kernel"


def run(quick: bool) -> list[Row]:
    agents, waves = (100, 20) if quick else (200, 50)
    names = [f"w{i}" for i in range(agents)]
    # The product's agents create ~3 inodes per new conversation (60 per wave): measured on a
    # disk still paying for a test run's deletions, the figure would be the disk's.
    create_us, waited = wait_for_quiet_disk()
    log(f"scale: a new file costs {create_us:.0f} us of CPU (waited {waited:.0f} s)")
    prod = _product(names, waves)
    bare = _bare(names, waves)
    split = _orchestrator_only(names, waves)
    shm = memory_filesystem()
    in_memory = _product(names, waves, shm, "product, state on tmpfs") if shm else None
    label = f"{agents} agents, {prod['sent']:,} delegates"
    warm = prod["warmup"]
    lost_note = (
        f"no answer {prod['noAnswer']}, error answers {prod['errorAnswers'] or 0}, "
        f"lost in warm-up {warm['sent'] - warm['completed']}"
    )
    if prod["sent"] < agents * waves:
        lost_note += f"; only {prod['sent']} of {agents * waves} sent within the time budget"
    rows = [
        Row(
            f"7 scale {label}: completed",
            "",
            prod["completed"],
            bare["completed"],
            "bare broker",
            goal=f"(of {agents * waves:,})",
            details={
                "product": prod,
                "bare": bare,
                "orchestratorOnly": split,
                "productStateOnTmpfs": in_memory,
                "agents": agents,
                "waves": waves,
                "fileCreateUs": round(create_us, 1),
                "waitedForQuietDiskS": waited,
                # Each wave's p50 and p99 per arm, for the picture (bench/plots.py).
                "series": {
                    "figure": NAME,
                    "unit": "ms",
                    **{
                        arm: data.pop("perWaveMs")
                        for arm, data in (
                            ("product", prod),
                            ("bare", bare),
                            ("orchestratorOnly", split),
                            ("productStateOnTmpfs", in_memory),
                        )
                        if data is not None
                    },
                },
            },
        ),
        Row(
            f"7 scale {label}: lost",
            "",
            prod["lost"],
            bare["lost"],
            "bare broker",
            goal="0",
            judge=lambda p, b, r: p == 0,
            note=lost_note if prod["lost"] or prod["sent"] < agents * waves else "",
        ),
        Row(
            f"7 scale {label}: p99",
            "ms",
            prod["p99"],
            bare["p99"],
            "bare broker",
            goal=f"<= {P99_GOAL_MS:g} ms",
            judge=lambda p, b, r: p <= P99_GOAL_MS,
            note=f"p50 {prod['latencyMs'].get('p50', float('nan')):.1f} ms "
            f"(bare {bare['latencyMs'].get('p50', float('nan')):.1f} ms); a wave's slowest "
            f"answer {_waves_ms(prod)} (bare {_waves_ms(bare)}); agents' CPU per "
            f"delegate {_cpu(prod)} (bare {_cpu(bare)}); a new file {create_us:.0f} us of CPU "
            f"at the start (waited {waited:.0f} s for it)",
        ),
        Row(
            f"7 scale p99, real orchestrator + {agents} bare agents",
            "ms",
            split["p99"],
            bare["p99"],
            "bare broker",
            goal="(diagnostic)",
            note=f"lost {split['lost']}" if split["lost"] else "",
        ),
    ]
    if in_memory is not None:
        rows.append(
            Row(
                f"7 scale p99, product with its state on tmpfs ({shm})",
                "ms",
                in_memory["p99"],
                bare["p99"],
                "bare broker",
                goal="(diagnostic)",
                note=f"a wave's slowest answer {_waves_ms(in_memory)}; agents' CPU per delegate "
                f"{_cpu(in_memory)}; lost {in_memory['lost']}",
            )
        )
    rows.append(
        Row(
            f"7 scale: {agents} cold agents started and answering",
            "s",
            prod["startup"]["seconds"],
            bare["startup"]["seconds"],
            "bare agents",
            goal="(reported)",
        )
    )
    return rows
