"""Figure 13: end to end through the front door. A user request on `control.sock`, as
`goondan send` speaks it, to a coordinator that delegates to a worker, and back: 8 hops.

Product: a real `goondan run` daemon with two scripted agents answering at once: `coord`
calls `agents__request` (the base package's tool) to `worker` in its first step and replies
with the worker's answer in its second; `worker` echoes in one step. The requester is the CLI's
own `ControlClient` (`goondan/cli/client.py`), one connection kept open, so the CLI's
interpreter start is not timed. Instance key `fd-<i // 25>`, as figure 1 does.

Baseline: the same 8 hops through the bare broker (`bench/bare.py`): the bench's driver ->
broker -> bare agent A, which forwards the delegate to bare agent B (`--forward`) -> broker ->
B -> broker -> A, which answers -> broker -> driver. The arms alternate in blocks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import baselines, product
from bench.driver import Driver
from bench.harness import Row, log, percentile, series, summary
from bench.procs import Procs, short_tmpdir

NAME = "frontdoor"
GOAL_RATIO = 2.0
TIMEOUT_S = 30.0


def write_bundle(directory: Path) -> Path:
    """`coord` asks `worker` through the orchestrator, then replies with its answer."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "goondan.yaml").write_text(
        """apiVersion: goondan.ai/v1
kind: Package
metadata: {name: frontdoor}
spec:
  version: "0.1.0"
  dependencies:
    - {name: "@goondan/base", version: "*"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: coord-script}
spec:
  provider: scripted
  model: scripted-v1
  options:
    rules:
      - when: "."
        steps:
          - call: agents__request
            args: {target: worker, input: "{{input}}"}
          - reply: "{{result.response}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: echo}
spec:
  provider: scripted
  model: scripted-v1
  options: {default: "You said: {{input}}"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: coord}
spec:
  modelConfig: {modelRef: "Model/coord-script"}
  tools:
    - ref: {kind: Tool, name: agents, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  modelConfig: {modelRef: "Model/echo"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: "Agent/coord"
  agents:
    - ref: "Agent/coord"
    - ref: "Agent/worker"
  policy:
    shutdown: {gracePeriodSeconds: 2}
"""
    )
    return directory


def _product_block(client: Any, start: int, n: int) -> tuple[list[float], int]:
    """`n` requests one after the other, as `goondan send` makes them; (latencies s, failures)."""
    latencies: list[float] = []
    failures = 0
    for i in range(start, start + n):
        text = f"ping {i}"
        t0 = time.perf_counter()
        reply = client.send(text, agent="coord", instance_key=f"fd-{i // 25}", timeout_s=TIMEOUT_S)
        elapsed = time.perf_counter() - t0
        if reply.status == "ok" and reply.response == f"You said: {text}":
            latencies.append(elapsed)
        else:
            failures += 1
    return latencies, failures


def run(quick: bool) -> list[Row]:
    from goondan.cli.client import ControlClient
    from goondan.paths import StatePaths

    n = 300 if quick else 1500
    blocks = 2 if quick else 3
    per_block = n // blocks
    warmup = 30
    prod_lat: list[float] = []
    bare_lat: list[float] = []
    failures = {"product": 0, "bare": 0}
    forward = product.delegate_payload("ping", "fd-0", "a")
    result = product.result_payload("a", "ping", "fd-0")
    with short_tmpdir() as tmp, Procs() as procs:
        daemon = product.Daemon(procs, tmp / "p", ["coord", "worker"], entry="coord")
        # Daemon writes a swarm of echo agents; this figure's coordinator needs a tool.
        daemon.bundle = write_bundle(tmp / "p" / "fd")
        try:
            daemon.start()
            endpoint = f"ipc://{tmp / 'bare.sock'}"
            baselines.start_broker(procs, endpoint)
            baselines.start_agents(procs, endpoint, ["b"], result)
            baselines.start_agents(
                procs, endpoint, ["a"], result, "--forward", "b", "--delegate", forward.hex()
            )
            with (
                ControlClient(StatePaths.at(daemon.state_root)) as client,
                Driver(endpoint, "driver") as drv,
            ):
                # Warm up: the first request also starts both of the product's agents.
                first, _ = _product_block(client, 0, 1)
                if not first:
                    raise RuntimeError(f"the coordinator did not answer: {daemon.log_tail()}")
                baselines.wait_routable(drv, ["a"], forward)
                offset = 1
                for block in range(blocks):
                    log(f"frontdoor: block {block + 1}/{blocks}")
                    skip = warmup if block == 0 else 5
                    lat, failed = _product_block(client, offset, skip + per_block)
                    prod_lat.extend(lat[skip:])
                    failures["product"] += failed
                    offset += skip + per_block
                    lat, failed = drv.round_trips("a", lambda i: forward, per_block, skip)
                    bare_lat.extend(lat)
                    failures["bare"] += failed
        finally:
            daemon.stop()

    us = [x * 1e6 for x in prod_lat]
    bare_us = [x * 1e6 for x in bare_lat]
    details = {
        "product": summary(us),
        "bare": summary(bare_us),
        "failures": failures,
        "path": "ControlClient on control.sock -> orchestrator -> coord (scripted: "
        "agents__request) -> orchestrator -> worker (scripted echo) -> orchestrator -> coord "
        "-> orchestrator -> client",
        "series": {"figure": NAME, "unit": "us", "product": series(us), "bare": series(bare_us)},
    }
    note = "" if not any(failures.values()) else f"failed requests: {failures}"
    return [
        Row(
            "13 front door round trip p50 (8 hops)",
            "us",
            percentile(us, 50),
            percentile(bare_us, 50),
            "bare broker",
            goal=f"<= {GOAL_RATIO:g}x bare",
            judge=lambda p, b, r: r is not None and r <= GOAL_RATIO,
            note=note,
            details=details,
        ),
        Row(
            "13 front door round trip p99 (8 hops)",
            "us",
            percentile(us, 99),
            percentile(bare_us, 99),
            "bare broker",
            goal="(reported)",
        ),
    ]
