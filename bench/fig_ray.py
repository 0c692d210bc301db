"""Figure 12: agents placed on Ray (`goondan run --placement ray`), each beside its baselines.

A one-node Ray cluster on 127.0.0.1 (`ray.cluster_utils.Cluster`, 1 CPU, dashboard and usage
stats off) and one real `goondan run --placement ray` daemon with two scripted agents: `r`
placed on Ray (an actor; its process connects back over the mutual-TLS TCP link) and `l`
placed locally (a child on agents.sock). The bench's driver is on agents.sock as `driver`.

- Round trip: one delegate in flight to `r`, beside the same to `l` (the local unix-socket
  path) and beside a bare Ray actor method call (`ray.get(actor.ping.remote())`) from this
  process. The arms alternate in blocks.
- Spawn: a delegate to `r` when it is not running, until the orchestrator logs `agent ready`
  (Ray places the actor, it starts the agent process, which connects over TLS), repeated after
  `goondan restart --agent r`; beside bare actor creation until its first method call returns.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from bench import product
from bench.harness import Row, log, percentile, summary
from bench.procs import PYTHON, Procs, short_tmpdir

NAME = "ray"
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class _Bare:
    def ping(self) -> int:
        return 1


def _place_on_ray(bundle: Any, agent: str) -> None:
    for path in bundle.glob("agents/*/agents.yaml"):
        text = path.read_text()
        text = text.replace(
            f"metadata: {{name: {agent}}}\nspec:\n",
            f"metadata: {{name: {agent}}}\nspec:\n  placement: ray\n",
        )
        path.write_text(text)


def _ready_events(daemon: product.Daemon, event: str) -> list[dict[str, Any]]:
    return [e for e in daemon.log_events(event) if e.get("agent") == "r"]


def _spawn(daemon: product.Daemon, drv: Any, *, first: bool) -> float:
    """Seconds from the start of `r`'s launch to the orchestrator's `agent ready` for it: the
    first from a delegate to it, then after `goondan restart --agent r` (from the old
    process's exit, which starts the new launch)."""
    before = len(_ready_events(daemon, "agent ready"))
    sent = time.time()
    if first:
        reply = drv.ask("r", product.delegate_payload("ping", "sp", "driver"), 120)
        if not reply.ok:
            raise RuntimeError(f"the Ray-placed agent failed: {reply.code}")
    else:
        restart = [PYTHON, "-m", "goondan.cli.main", "restart", "--agent", "r"]
        subprocess.run(
            [*restart, "--state-root", str(daemon.state_root)],
            capture_output=True,
            timeout=60,
            check=True,
        )
    deadline = time.monotonic() + 120
    while len(_ready_events(daemon, "agent ready")) <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray-placed agent never became ready: {daemon.log_tail()}")
        time.sleep(0.05)
    ready = _ready_events(daemon, "agent ready")[-1]["ts"]
    if not first:
        exits = [e["ts"] for e in _ready_events(daemon, "agent process exited") if e["ts"] >= sent]
        sent = exits[0] if exits else sent
    return float(ready - sent)


def run(quick: bool) -> list[Row]:
    os.environ.update(RAY_ENV)
    import ray
    from ray.cluster_utils import Cluster

    n = 200 if quick else 1000
    blocks = 2 if quick else 4
    spawns = 2 if quick else 5
    per_block = n // blocks
    lat: dict[str, list[float]] = {"ray": [], "local": [], "bareActor": []}
    spawn_s: list[float] = []
    bare_spawn_s: list[float] = []
    failures = {"ray": 0, "local": 0}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": 80 * 1024 * 1024,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
        },
    )
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        bare_class: Any = ray.remote(_Bare).options(num_cpus=0, max_restarts=0)
        with short_tmpdir() as tmp, Procs() as procs:
            daemon = product.Daemon(
                procs,
                tmp / "p",
                ["r", "l", "driver"],
                entry="l",
                run_args=["--placement", "ray", "--ray-address", cluster.address],
            )
            _place_on_ray(daemon.bundle, "r")
            try:
                os.environ.update(RAY_ENV)  # the daemon inherits it
                daemon.start(timeout_s=120)
                with daemon.driver() as drv:
                    if not daemon.wait_status(["driver"], {"idle", "processing"}, 10):
                        raise RuntimeError("the orchestrator did not take the bench's `ready`")
                    for i in range(spawns):
                        log(f"ray: spawn {i + 1}/{spawns}")
                        spawn_s.append(_spawn(daemon, drv, first=i == 0))
                        started = time.perf_counter()
                        actor: Any = bare_class.remote()
                        ray.get(actor.ping.remote())
                        bare_spawn_s.append(time.perf_counter() - started)
                        ray.kill(actor)
                    actor = bare_class.remote()
                    ray.get(actor.ping.remote())
                    drv.ask("l", product.delegate_payload("ping", "w", "driver"), 60)
                    offset = 0
                    for block in range(blocks):
                        log(f"ray: round trips, block {block + 1}/{blocks}")
                        for target in ("r", "l"):
                            base = offset

                            def payload_at(i: int, base: int = base) -> bytes:
                                return product.delegate_payload(
                                    "ping", f"rt-{(base + i) // 25}", "driver"
                                )

                            got, failed = drv.round_trips(target, payload_at, per_block, 20)
                            lat["ray" if target == "r" else "local"].extend(got)
                            failures["ray" if target == "r" else "local"] += failed
                        for _ in range(per_block):
                            started = time.perf_counter()
                            ray.get(actor.ping.remote())
                            lat["bareActor"].append(time.perf_counter() - started)
                        offset += per_block + 20
            finally:
                daemon.stop()
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
    us = {arm: [x * 1e6 for x in values] for arm, values in lat.items()}
    ms_spawn = [x * 1e3 for x in spawn_s]
    ms_bare_spawn = [x * 1e3 for x in bare_spawn_s]
    details = {
        **{arm: summary(values) for arm, values in us.items()},
        "spawnMs": ms_spawn,
        "bareActorSpawnMs": ms_bare_spawn,
        "failures": failures,
    }
    note = "" if not any(failures.values()) else f"failed requests: {failures}"
    return [
        Row(
            "12 round trip p50, Ray-placed agent (TLS)",
            "us",
            percentile(us["ray"], 50),
            percentile(us["local"], 50),
            "local agent, unix socket",
            goal="(reported)",
            note=note,
            details=details,
        ),
        Row(
            "12 round trip p50, Ray-placed agent (TLS)",
            "us",
            percentile(us["ray"], 50),
            percentile(us["bareActor"], 50),
            "bare Ray actor call",
            goal="(reported)",
        ),
        Row(
            "12 Ray-placed spawn -> ready p50",
            "ms",
            percentile(ms_spawn, 50) if ms_spawn else None,
            percentile(ms_bare_spawn, 50) if ms_bare_spawn else None,
            "bare Ray actor creation",
            goal="(reported)",
        ),
    ]
