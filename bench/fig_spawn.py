"""Figure 3: agent spawn -> ready, one at a time (p50) and 8 / 40 at once (until all ready).

Product: a real `goondan run` daemon starts agents on demand. The driver sends a delegate to an
agent that is not running; spawn -> ready is the time from that send until the orchestrator
logs `agent ready` for it (its JSON log line on stderr, with a microsecond timestamp: the moment
the orchestrator took the agent's `ready` frame and can route to it). For a burst, the delegates
to 8 (40) cold agents go out together and the figure is the time until the last is ready. If the
log line cannot be found, the figure falls back to the first reply's latency minus the warm
round trip's p50 (said in the note). Every agent has a scripted model and no tools.

Baselines, in the same run: a bare `python -c "import zmq"` process that connects a DEALER and
says hello (Popen -> hello received), and a plain `os.fork` of a helper that has the agent
runtime imported, the child creating its ZeroMQ context, connecting and saying hello.

Goals on the p50 one at a time, both absolute: <= 25 ms (the first goal, on the `python -c`
row) and <= 10 ms (issue 31's, on the `os.fork` row). The bursts are reported.
"""

from __future__ import annotations

import time
from typing import Any

from bench import baselines, product
from bench.harness import Row, log, percentile, series, summary

NAME = "spawn"
GOAL_MS = 25.0  # the first goal, judged beside the `python -c` baseline
FORK_GOAL_MS = 10.0  # issue 31's, judged beside `os.fork` (still absolute, as the issue says)


def _product(quick: bool, seq: int, bursts: list[int]) -> dict[str, Any]:
    seq_names = [f"s{i}" for i in range(seq)]
    burst_names = {n: [f"p{n}x{i}" for i in range(n)] for n in bursts}
    agents = ["driver", "b", *seq_names, *(a for names in burst_names.values() for a in names)]
    out: dict[str, Any] = {}
    with product.driven_run(agents, entry="b") as (_, daemon, drv):
        payload = product.delegate_payload("ping", "spawn", "driver")
        if not drv.ask("b", payload, timeout_s=30).ok:
            raise RuntimeError("the warm agent did not answer")
        warm, _ = drv.round_trips("b", lambda i: payload, 200, 20)
        warm_ms = percentile(warm, 50) * 1000
        sent_at: dict[str, float] = {}
        cold_ms: dict[str, float] = {}
        log(f"spawn: product, {seq} one at a time")
        for name in seq_names:
            time.sleep(0.1)
            sent_at[name] = time.time()
            reply = drv.ask(name, payload, timeout_s=60)
            if reply.ok:
                cold_ms[name] = reply.latency_s * 1000
        burst_first_reply: dict[int, list[float]] = {}
        for n, names in burst_names.items():
            log(f"spawn: product, {n} at once")
            time.sleep(0.3)
            start = time.time()
            for name in names:
                sent_at[name] = start
            wave = drv.wave([(name, payload) for name in names], timeout_s=120)
            burst_first_reply[n] = [x * 1000 for x in wave.latencies_s]
            if wave.ok != n:
                out.setdefault("failures", {})[n] = {
                    "ok": wave.ok,
                    "errors": wave.errors,
                    "lost": wave.lost,
                }
    ready_at: dict[str, float] = {}
    for record in daemon.log_events("agent ready"):
        agent = record.get("agent")
        if isinstance(agent, str) and agent not in ready_at:
            ready_at[agent] = record["ts"]
    from_log = all(name in ready_at for name in sent_at)

    def spawn_ms(names: list[str]) -> list[float]:
        if from_log:
            return [(ready_at[n] - sent_at[n]) * 1000 for n in names]
        return [cold_ms.get(n, float("nan")) - warm_ms for n in names]

    out["method"] = (
        "delegate sent -> orchestrator logs `agent ready`"
        if from_log
        else "first reply latency minus warm round trip p50 (no `agent ready` log line found)"
    )
    out["warmRoundTripMs"] = warm_ms
    out["seq"] = spawn_ms(seq_names)
    out["seqFirstReplyMs"] = list(cold_ms.values())
    for n, names in burst_names.items():
        if from_log:
            out[f"burst{n}"] = spawn_ms(names)
        else:  # each agent's first reply, minus the warm round trip
            out[f"burst{n}"] = [x - warm_ms for x in burst_first_reply[n]]
        out[f"burst{n}FirstReplyMs"] = burst_first_reply[n]
    return out


def _baselines(seq: int, bursts: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with baselines.hello_baselines() as (procs, sink, spawner):
        log(f"spawn: python -c, {seq} one at a time, then {bursts} at once")
        seq_ms: list[float] = []
        for _ in range(seq):
            time.sleep(0.05)
            _, lat, _ = spawner.spawn(1)
            seq_ms.extend(x * 1000 for x in lat)
        out["subprocess"] = {"seq": seq_ms}
        for n in bursts:
            time.sleep(0.3)
            _, lat, _ = spawner.spawn(n)
            out["subprocess"][f"burst{n}"] = [x * 1000 for x in lat]
            out["subprocess"][f"burst{n}Complete"] = len(lat) == n
        spawner.close()
        forker = baselines.Forker(procs, sink)
        log(f"spawn: os.fork ({forker.preloaded} preloaded)")
        fork: dict[str, Any] = {"preloaded": forker.preloaded, "seq": []}
        pids: list[int] = []
        for _ in range(seq):
            time.sleep(0.05)
            lat, got = forker.spawn(1)
            fork["seq"].extend(x * 1000 for x in lat)
            pids.extend(got)
        for n in bursts:
            time.sleep(0.3)
            lat, got = forker.spawn(n)
            fork[f"burst{n}"] = [x * 1000 for x in lat]
            fork[f"burst{n}Complete"] = len(lat) == n
            pids.extend(got)
        forker.kill_children(pids)
        out["fork"] = fork
    return out


def run(quick: bool) -> list[Row]:
    seq = 5 if quick else 10
    bursts = [8, 40]
    prod = _product(quick, seq, bursts)
    base = _baselines(seq, bursts)
    sub, fork = base["subprocess"], base["fork"]
    details = {
        "method": prod["method"],
        "product": {k: summary(v) if isinstance(v, list) else v for k, v in prod.items()},
        "subprocess": {k: summary(v) if isinstance(v, list) else v for k, v in sub.items()},
        "fork": {k: summary(v) if isinstance(v, list) else v for k, v in fork.items()},
    }
    # The samples of each arm, one at a time and by burst, for the picture (bench/plots.py).
    details["series"] = {
        "figure": NAME,
        "unit": "ms",
        **{
            arm: {key: series(data[key], 2) for key in ("seq", *(f"burst{n}" for n in bursts))}
            for arm, data in (("product", prod), ("subprocess", sub), ("fork", fork))
        },
    }
    note = prod["method"]
    if prod.get("failures"):
        note += f"; bursts with failed requests: {prod['failures']}"
    rows = [
        Row(
            "3 spawn -> ready p50, one at a time",
            "ms",
            percentile(prod["seq"], 50),
            percentile(sub["seq"], 50),
            "python -c zmq",
            goal=f"<= {GOAL_MS:g} ms",
            judge=lambda p, b, r: p <= GOAL_MS,
            note=note,
            details=details,
        ),
        Row(
            "3 spawn -> ready p50, one at a time",
            "ms",
            percentile(prod["seq"], 50),
            percentile(fork["seq"], 50),
            "os.fork",
            goal=f"<= {FORK_GOAL_MS:g} ms",
            judge=lambda p, b, r: p <= FORK_GOAL_MS,
        ),
    ]
    for n in bursts:
        product_all = max(prod[f"burst{n}"], default=float("nan"))
        for name, data in (("python -c zmq", sub), ("os.fork", fork)):
            complete = data.get(f"burst{n}Complete", False)
            rows.append(
                Row(
                    f"3 spawn -> ready, {n} at once: all ready",
                    "ms",
                    product_all,
                    max(data[f"burst{n}"]) if complete else None,
                    name,
                    goal="(reported)",
                    note="" if complete else f"{name}: not all {n} said hello",
                )
            )
    return rows
