"""Figure 1: delegate round trip A -> orchestrator -> B -> orchestrator -> A, one in flight.

Product: a real `goondan run` daemon; B is a real agent process (spawned by the daemon on the
first delegate) answering with the scripted model in one step, no tools, a full turn with its
conversation on disk. A is the bench's driver connected to `agents.sock` as the swarm agent
`driver` (it says `ready` first). Requests use instance key `rt-<i // 25>`, so each
conversation holds at most 50 messages, as a real one might.

Baseline: the same driver, the bare broker (`bench/bare.py`) and a bare agent B answering at
once, with frames of the same size. The arms alternate in blocks, so load from other work on the
machine falls on all of them.

A third arm splits the product's cost: the real orchestrator with the bare agent as B (`bb`,
connected to `agents.sock`, saying `ready`), so the orchestrator's share and the agent's
share of the product's round trip can be read apart.

Goals: p50 <= 2x the bare broker's, p99 <= 1.5x (issue 31's).
"""

from __future__ import annotations

from bench import baselines, product, wire
from bench.driver import Driver
from bench.harness import Row, log, percentile, series, summary
from bench.procs import Procs, short_tmpdir

NAME = "roundtrip"
PER_KEY = 25  # requests per conversation (instance key)


def run(quick: bool) -> list[Row]:
    n = 1000 if quick else 4000
    blocks = 2 if quick else 4
    per_block = n // blocks
    warmup = 200
    product_lat: list[float] = []
    bare_lat: list[float] = []
    split_lat: list[float] = []
    first_lat: list[float] = []  # the product's requests that began a conversation
    failures = {"product": 0, "bare": 0, "orchestratorOnly": 0}

    def payload_for(i: int) -> bytes:
        return product.delegate_payload("ping", f"rt-{i // PER_KEY}", "driver")

    result = product.result_payload("b", "ping", "rt-0")
    with short_tmpdir() as tmp, Procs() as procs:
        daemon = product.Daemon(procs, tmp / "p", ["b", "bb", "driver"], entry="b")
        try:
            daemon.start()
            endpoint = f"ipc://{tmp / 'bare.sock'}"
            baselines.start_broker(procs, endpoint)
            baselines.start_agents(procs, endpoint, ["b"], result)
            bb_result = product.result_payload("bb", "ping", "rt-0")
            baselines.start_agents(procs, daemon.agents_endpoint, ["bb"], bb_result, "--product")
            with (
                daemon.driver() as p_drv,
                Driver(endpoint, "driver") as b_drv,
            ):
                if not daemon.wait_status(["driver", "bb"], {"idle", "processing"}, 10):
                    raise RuntimeError("the orchestrator did not take the bench's `ready`")
                # Warm up (the first delegate also starts the product's B).
                baselines.wait_routable(p_drv, ["b", "bb"], payload_for(0))
                baselines.wait_routable(b_drv, ["b"], payload_for(0))
                offset = 0
                for block in range(blocks):
                    log(f"roundtrip: block {block + 1}/{blocks}")
                    for drv, target, samples, arm in (
                        (p_drv, "b", product_lat, "product"),
                        (b_drv, "b", bare_lat, "bare"),
                        (p_drv, "bb", split_lat, "orchestratorOnly"),
                    ):
                        base = offset

                        def payload_at(i: int, base: int = base) -> bytes:
                            return payload_for(base + i)

                        skipped = warmup if block == 0 else 20
                        lat, failed = drv.round_trips(target, payload_at, per_block, skipped)
                        if arm == "product" and not failed:  # else the positions are unknown
                            first_lat.extend(
                                x for k, x in enumerate(lat) if (base + skipped + k) % PER_KEY == 0
                            )
                        samples.extend(lat)
                        failures[arm] += failed
                    offset += per_block + warmup
        finally:
            daemon.stop()

    us = [x * 1e6 for x in product_lat]
    bare_us = [x * 1e6 for x in bare_lat]
    split_us = [x * 1e6 for x in split_lat]
    first_us = [x * 1e6 for x in first_lat]
    sizes = {
        "delegateFrameBytes": len(
            wire.delegate("driver", "b", product.delegate_payload("ping", "rt-0", "driver"), "1")
        ),
        "delegatePayloadBytes": len(product.delegate_payload("ping", "rt-0", "driver")),
        "resultPayloadBytes": len(result),
    }
    details = {
        "product": summary(us),
        "bare": summary(bare_us),
        "orchestratorOnly": summary(split_us),
        "productFirstRequests": summary(first_us),
        "failures": failures,
        "payloadSizes": sizes,
        # Sorted, subsampled samples for the CDF picture (bench/plots.py).
        "series": {
            "figure": NAME,
            "unit": "us",
            "product": series(us),
            "bare": series(bare_us),
            "orchestratorOnly": series(split_us),
        },
        "path": "driver(DEALER on agents.sock as agent `driver`) -> orchestrator -> agent b "
        "(scripted, no tools) -> orchestrator -> driver",
    }
    note = "" if not any(failures.values()) else f"failed requests: {failures}"
    # A conversation's first request is where the disk shows (docs/performance.md).
    first_note = (
        f"a conversation's first request (1 in {PER_KEY}) p50 {percentile(first_us, 50):.0f} us"
        if first_us
        else ""
    )
    return [
        Row(
            "1 delegate round trip p50",
            "us",
            percentile(us, 50),
            percentile(bare_us, 50),
            "bare broker",
            goal="<= 2x bare",
            judge=lambda p, b, r: r is not None and r <= 2.0,
            note=note,
            details=details,
        ),
        Row(
            "1 delegate round trip p99",
            "us",
            percentile(us, 99),
            percentile(bare_us, 99),
            "bare broker",
            goal="<= 1.5x bare",
            judge=lambda p, b, r: r is not None and r <= 1.5,
            note=first_note,
        ),
        Row(
            "1 round trip p50, real orchestrator + bare B",
            "us",
            percentile(split_us, 50),
            percentile(bare_us, 50),
            "bare broker",
            goal="(diagnostic)",
        ),
    ]
