"""Figure 7: scale. 200 agents, 10,000 delegates in flight in waves: completed, lost, p99.

Product: a real `goondan run` daemon with 200 scripted agents (no tools), started by a first
wave of one delegate each (the time until all 200 answered is reported too). Then 50 waves: each
wave sends one delegate to every agent at once (200 in flight) and waits for all the answers
before the next; 50 x 200 = 10,000 delegates. Every agent moves to a new conversation (instance
key) every 10 waves, a tenth of the agents in each wave, as new conversations arrive over time
in a real daemon; so a conversation holds at most 20 messages. Latency is per delegate, from
the driver's send to its answer. Before the measured waves, 10 warm-up waves (one round of
conversations) let every process take its one-time costs (first turn, first conversation);
their delegates are checked for losses too but not timed. Every answer's content is checked:
the agent that answered, its text (`You said: ping`, the scripted echo) and the conversation;
an `ok` answer with other content counts as an error answer, `WRONG_ANSWER`. Lost = sent minus
answered `ok` with the right content (no answer at all, or an error answer; the note splits
them); a loss makes `python -m bench` exit 1. Baseline: the same driver and waves through the
bare broker to 200 bare agents (their fixed answer's text is checked).

The goal is p99 <= 1.25x the bare broker's in the same run: a ratio, because the machine's speed
(which moves by a quarter within minutes on these shared VMs) moves both arms together, and an
absolute figure in milliseconds judged the machine as much as the product.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import baselines, product
from bench.driver import Driver, Expect, WaveResult
from bench.harness import Row, log, percentile, summary
from bench.procs import (
    Procs,
    cpu_text,
    cpu_us_per,
    cpu_use,
    memory_filesystem,
    memory_monitors,
    short_tmpdir,
    wait_for_quiet_disk,
)

NAME = "scale"
P99_GOAL_RATIO = 1.25  # of the bare broker's p99 in the same run
WAVE_TIMEOUT_S = 60.0
WARMUP_WAVES = 10
BUDGET_S = 240.0  # per arm, after start-up: waves stop early (and say so) past this
REPLY = product.ECHO_REPLY.replace("{{input}}", "ping")  # what every agent answers to `ping`

# One wave: its requests (agent, delegate payload) and each answer's expected content.
Wave = tuple[list[tuple[str, bytes]], list[Expect]]


def _conversation(agent: int, wave: int) -> str:
    """The instance key agent `agent` uses in `wave`: a new one every 10 waves, with the agents'
    moves spread over the waves (a tenth of them in each)."""
    return f"k{(wave + agent % 10) // 10}"


def _payloads(
    names: list[str], wave: int, timeout_ms: int = 60_000, start: int = 0
) -> list[tuple[str, bytes]]:
    return [
        (name, product.delegate_payload("ping", _conversation(i, wave), "driver", timeout_ms))
        for i, name in enumerate(names, start)
    ]


def product_wave(names: list[str], wave: int, timeout_ms: int = 60_000, start: int = 0) -> Wave:
    """A wave to the product's agents `names` (numbered from `start`, for their conversation
    schedule): each answers as itself, in its conversation of the wave."""
    expected: list[Expect] = [
        (name, REPLY, _conversation(i, wave)) for i, name in enumerate(names, start)
    ]
    return _payloads(names, wave, timeout_ms, start), expected


def bare_wave(names: list[str], wave: int, start: int = 0) -> Wave:
    """A wave to bare agents, which answer every delegate with the same fixed result."""
    return _payloads(names, wave, start=start), [(None, REPLY, None)] * len(names)


def run_waves(
    drv: Driver,
    plan: Callable[[int], Wave],
    warmup: int,
    waves: int,
    tag: str,
    pids: list[int],
    budget_s: float = BUDGET_S,
    router: list[int] | None = None,
) -> dict[str, Any]:
    """`warmup` untimed waves, then `waves` measured ones, wave `i` being `plan(i)` (warm-up
    waves first); `pids` are the agents' processes, whose CPU time over the measured waves is
    reported per delegate, and `router` the orchestrator's or broker's, likewise when given.
    Every answer's content is checked, in the warm-up too."""
    warm = WaveResult()
    warm_sent = 0
    wrong: list[str] = []
    for wave in range(warmup):
        requests, expected = plan(wave)
        result = drv.wave(requests, WAVE_TIMEOUT_S, expected)
        warm.ok += result.ok
        warm_sent += len(requests)
        wrong.extend(result.wrong)
    warmup_counts = {"sent": warm_sent, "completed": warm.ok}
    total = WaveResult()
    sent = 0
    slowest_ms: list[float] = []  # each wave's slowest answer: how long the wave took
    wave_p50: list[float] = []  # each wave's p50 and p99, for the picture (bench/plots.py)
    wave_p99: list[float] = []
    monitors = memory_monitors()
    cpu_before = cpu_use(pids)
    router_before = cpu_use(router or [])
    monitors_before = cpu_use(monitors)
    started = time.monotonic()
    plans = [plan(warmup + wave) for wave in range(waves)]
    for wave in range(waves):
        if time.monotonic() - started > budget_s:
            log(f"scale: {tag}: time budget spent after {wave} waves")
            break
        requests, expected = plans[wave]
        result = drv.wave(requests, WAVE_TIMEOUT_S, expected)
        sent += len(requests)
        total.ok += result.ok
        total.lost += result.lost
        total.latencies_s.extend(result.latencies_s)
        wrong.extend(result.wrong)
        slowest_ms.append(max(result.latencies_s, default=math.nan) * 1000)
        wave_p50.append(round(percentile(result.latencies_s, 50) * 1000, 2))
        wave_p99.append(round(percentile(result.latencies_s, 99) * 1000, 2))
        for code, count in result.errors.items():
            total.errors[code] = total.errors.get(code, 0) + count
        if (wave + 1) % 10 == 0:
            log(f"scale: {tag}: {wave + 1}/{waves} waves")
    seconds = time.monotonic() - started
    cpu = cpu_us_per(cpu_before, cpu_use(pids), sent)
    router_cpu = cpu_us_per(router_before, cpu_use(router), sent) if router else None
    monitors_cpu = cpu_us_per(monitors_before, cpu_use(monitors), sent) if monitors else None
    ms = [x * 1000 for x in total.latencies_s]
    return {
        "sent": sent,
        "completed": total.ok,
        "noAnswer": total.lost,
        "errorAnswers": total.errors,
        "wrongAnswers": wrong[:5],
        "lost": sent - total.ok + warm_sent - warm.ok,
        "warmup": warmup_counts,
        "latencyMs": summary(ms),
        "p99": percentile(ms, 99),
        "waveSlowestAnswerMs": summary(slowest_ms),
        "perWaveMs": {"p50": wave_p50, "p99": wave_p99},
        "seconds": seconds,
        "agentsCpu": cpu,  # per delegate
        "routerCpu": router_cpu,
        "memoryMonitorCpu": monitors_cpu,  # per delegate; None where the kernel runs none
    }


def _waves(
    drv: Driver, names: list[str], waves: int, tag: str, pids: list[int], bare: bool = False
) -> dict[str, Any]:
    """Figure 7's warm-up and measured waves, every agent in each."""

    def plan(wave: int) -> Wave:
        return bare_wave(names, wave) if bare else product_wave(names, wave)

    return run_waves(drv, plan, WARMUP_WAVES, waves, tag, pids)


def lost_note(arm: dict[str, Any], planned: int) -> str:
    """What the lost row's note says: how the losses split, and any wrong answers."""
    warm = arm["warmup"]
    note = (
        f"no answer {arm['noAnswer']}, error answers {arm['errorAnswers'] or 0}, "
        f"lost in warm-up {warm['sent'] - warm['completed']}, "
        f"in the start wave {arm.get('startLost', 0)}"
    )
    if arm["wrongAnswers"]:
        note += f"; wrong answers, e.g. {'; '.join(arm['wrongAnswers'])}"
    if arm["sent"] < planned:
        note += f"; only {arm['sent']} of {planned} sent within the time budget"
    return note


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
        requests, expected = product_wave(names, 0, timeout_ms=180_000)
        first = drv.wave(requests, 185, expected)
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
        count_start_wave(result, first, startup, len(names))
    return result


def count_start_wave(
    result: dict[str, Any], first: WaveResult, startup: dict[str, Any], agents: int
) -> None:
    """Add the start wave to an arm's `result`: its answers are checked like the others', and
    a loss there is a loss."""
    result["startup"] = startup
    result["startLost"] = agents - first.ok
    result["lost"] += result["startLost"]
    result["wrongAnswers"] = first.wrong + result["wrongAnswers"]


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
        return _waves(drv, names, waves, "real orchestrator + bare agents", pids, bare=True)


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
            result = _waves(drv, names, waves, "bare", [agent.pid for agent in agents], bare=True)
            result["startup"] = startup
    return result


def _lost_notes(prod: dict[str, Any], in_memory: dict[str, Any] | None, planned: int) -> str:
    """The lost row's note: the product arm's losses, and the tmpfs arm's (counted in too)."""
    notes = []
    if prod["lost"] or prod["sent"] < planned:
        notes.append(lost_note(prod, planned))
    if in_memory is not None and (in_memory["lost"] or in_memory["sent"] < planned):
        notes.append(f"state on tmpfs: {lost_note(in_memory, planned)}")
    return "; ".join(notes)


def _waves_ms(arm: dict[str, Any]) -> str:
    slowest = arm["waveSlowestAnswerMs"]
    return f"median {slowest.get('p50', math.nan):.1f}, worst {slowest.get('max', math.nan):.1f} ms"


def monitor_note(*arms: tuple[str, dict[str, Any]]) -> str:
    """The kernel's memory monitor's CPU per delegate in each named arm, where the host runs
    one (`procs.memory_monitors`), as a note's last clause."""
    cpu = [(name, arm.get("memoryMonitorCpu")) for name, arm in arms]
    readings = [f"{name} {c['cpuUs']:.1f} us" for name, c in cpu if c is not None]
    if not readings:
        return ""
    return "; the kernel's memory monitor (kdamond) per delegate: " + ", ".join(readings)


def _cpu(arm: dict[str, Any]) -> str:
    return cpu_text(arm["agentsCpu"])


def run(quick: bool) -> list[Row]:
    agents, waves = (100, 20) if quick else (200, 50)
    names = [f"w{i}" for i in range(agents)]
    # The product's agents create ~3 inodes per new conversation (60 per wave): measured on a
    # disk still paying for a test run's deletions, the figure would be the disk's.
    # `--quick` does not wait (its two minutes would not allow it): its note gives the cost.
    create_us, waited = wait_for_quiet_disk(0.0 if quick else 150.0)
    log(f"scale: a new file costs {create_us:.0f} us of CPU (waited {waited:.0f} s)")
    prod = _product(names, waves)
    bare = _bare(names, waves)
    split = _orchestrator_only(names, waves)
    shm = memory_filesystem()
    # A diagnostic arm `--quick` leaves out, to stay within its two minutes.
    in_memory = (
        _product(names, waves, shm, "product, state on tmpfs") if shm and not quick else None
    )
    label = f"{agents} agents, {prod['sent']:,} delegates"
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
            prod["lost"] + (in_memory["lost"] if in_memory else 0),
            bare["lost"],
            "bare broker",
            goal="0",
            judge=lambda p, b, r: p == 0,
            note=_lost_notes(prod, in_memory, agents * waves),
            correctness=True,
        ),
        Row(
            f"7 scale {label}: p99",
            "ms",
            prod["p99"],
            bare["p99"],
            "bare broker",
            goal=f"<= {P99_GOAL_RATIO:g}x bare",
            judge=lambda p, b, r: r is not None and r <= P99_GOAL_RATIO,
            note=f"p50 {prod['latencyMs'].get('p50', float('nan')):.1f} ms "
            f"(bare {bare['latencyMs'].get('p50', float('nan')):.1f} ms); a wave's slowest "
            f"answer {_waves_ms(prod)} (bare {_waves_ms(bare)}); agents' CPU per "
            f"delegate {_cpu(prod)}, bare agents {_cpu(bare)}; a new file {create_us:.0f} us of "
            f"CPU at the start (waited {waited:.0f} s for it)"
            + monitor_note(("product", prod), ("bare", bare)),
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
