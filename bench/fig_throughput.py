"""Figure 2: orchestrator routing throughput, many requests in flight, 2 / 8 / 32 agents.

N bare agents (`bench/bare.py`), each both requester and responder: each keeps 1000/N delegates
in flight to the others (round robin), and answers every delegate it gets at once. Product: the
agents connect to a real `goondan run` daemon's `agents.sock` as agents of its swarm (they say
`ready` first and heartbeat), so every message goes through the real orchestrator. Baseline:
the same agents through the bare broker. The agents are the same program on both arms, so the
figure isolates the broker; how fast a real agent runs its turns is figure 1's and 7's matter.

Messages/s counts routed messages (a delegate and its result are 2), completed inside the
measuring window (after a warm-up), summed over the agents.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from bench import baselines, product
from bench.driver import Driver
from bench.harness import Row, log
from bench.procs import PYTHON, Procs, short_tmpdir

NAME = "throughput"
IN_FLIGHT = 1000


def _measure(
    procs: Procs,
    endpoint: str,
    names: list[str],
    warmup: float,
    duration: float,
    product_mode: bool,
    wait_ready: Any = None,
) -> dict[str, Any]:
    window = max(1, IN_FLIGHT // len(names))
    result = product.result_payload("x", "ping", "tp")
    payload = product.delegate_payload("ping", "tp", "bench")
    agents = []
    for name in names:
        extra = [
            "--targets",
            ",".join(n for n in names if n != name),
            "--window",
            str(window),
            "--delegate",
            payload.hex(),
            "--warmup",
            str(warmup),
            "--duration",
            str(duration),
        ]
        if product_mode:
            extra.append("--product")
        agents.append((name, extra))
    started = [
        procs.spawn(
            [
                PYTHON,
                "-m",
                "bench.bare",
                "agent",
                endpoint,
                name,
                "--result",
                result.hex(),
                *extra,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for name, extra in agents
    ]
    for proc in started:
        if baselines.read_line(proc, 120) != "up":
            raise RuntimeError("a bare agent did not start")
    if wait_ready is not None:
        wait_ready()
    else:
        with Driver(endpoint, "probe") as probe:
            baselines.wait_routable(probe, names, payload)
    for proc in started:
        baselines.tell(proc, "go")
    deadline = time.monotonic() + warmup + duration + 60
    for proc in started:
        line = baselines.read_line(proc, max(0.1, deadline - time.monotonic()))
        if line != "drained":
            raise RuntimeError(f"an agent did not drain its requests (got {line!r})")
    stats = []
    for proc in started:
        baselines.tell(proc, "stop")
        line = baselines.read_line(proc, 10)
        if not line.startswith("stats "):
            raise RuntimeError("an agent did not report")
        stats.append(json.loads(line.removeprefix("stats ")))
        proc.wait(timeout=10)
    in_window = sum(s["inWindow"] for s in stats)
    return {
        "msgsPerSecond": 2 * in_window / duration,
        "roundTripsInWindow": in_window,
        "errors": sum(s["errors"] for s in stats),
        "sent": sum(s["sent"] for s in stats),
        "completed": sum(s["completed"] for s in stats),
        "answered": sum(s["answered"] for s in stats),
    }


def run(quick: bool) -> list[Row]:
    counts = [2, 8, 32]
    warmup, duration = (0.5, 1.0) if quick else (1.0, 3.0)
    reps = 1 if quick else 2
    rows = []
    for n in counts:
        names = [f"a{i}" for i in range(n)]
        prods: list[dict[str, Any]] = []
        bares: list[dict[str, Any]] = []
        # The arms alternate, each time with a fresh daemon / broker and fresh agents.
        for rep in range(reps):
            with short_tmpdir() as tmp, Procs() as procs:
                log(f"throughput: {n} agents, real orchestrator ({rep + 1}/{reps})")
                with product.running(procs, tmp / "p", [*names, "driver"], names[0]) as daemon:

                    def ready(daemon: product.Daemon = daemon, names: list[str] = names) -> None:
                        if not daemon.wait_status(names, {"idle", "processing"}, 30):
                            raise RuntimeError("the orchestrator did not take every `ready`")

                    prods.append(
                        _measure(
                            procs, daemon.agents_endpoint, names, warmup, duration, True, ready
                        )
                    )
                log(f"throughput: {n} agents, bare broker ({rep + 1}/{reps})")
                endpoint = f"ipc://{tmp / 'bare.sock'}"
                baselines.start_broker(procs, endpoint)
                bares.append(_measure(procs, endpoint, names, warmup, duration, False))
        lost = sum(r["sent"] - r["completed"] for r in prods + bares)
        errors = sum(r["errors"] for r in prods + bares)
        rows.append(
            Row(
                f"2 routing throughput, {n} agents",
                "msg/s",
                _mean(r["msgsPerSecond"] for r in prods),
                _mean(r["msgsPerSecond"] for r in bares),
                "bare broker",
                goal=">= 0.6x bare",
                judge=lambda p, b, r: r is not None and r >= 0.6,
                note=f"errors {errors}, unanswered {lost}" if errors or lost else "",
                details={"product": prods, "bare": bares, "inFlight": IN_FLIGHT, "agents": n},
            )
        )
    # By agent count, for the picture (bench/plots.py).
    rows[0].details["series"] = {
        "figure": NAME,
        "unit": "msg/s",
        "agents": counts,
        "product": [round(r.product or 0.0) for r in rows],
        "bare": [round(r.baseline or 0.0) for r in rows],
    }
    return rows


def _mean(values: Any) -> float:
    items = [float(v) for v in values]
    return sum(items) / len(items)
