"""Figure 9: what power-loss safety costs: the delegate round trip with `--durability fsync`.

Product: two real `goondan run` daemons, each with an agent B answering with the scripted model
in one step (a full turn, its conversation on this machine's disk, not a tmpfs). One runs with
the default durability (every conversation event written to the OS before the turn answers, so
an agent crash loses nothing; fsync'd once the instance is quiet); the other with `--durability
fsync` (every event, and a new conversation's directory entries, fsync'd before the loop
goes on, so a power loss loses nothing answered). A is the bench's
driver on each daemon's `agents.sock`, one delegate in flight; the arms alternate in blocks.

Baseline: the disk's floor for one durable write, timed in the bench process between the
blocks: an append of an answer's size to a file, then its fsync.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench import product
from bench.harness import Row, log, percentile, summary
from bench.procs import Procs, short_tmpdir

NAME = "durability"
APPEND_BYTES = 320  # about one conversation event of the scripted turn


def _append_fsync(directory: Path, n: int) -> list[float]:
    """`n` timed appends, each followed by an fsync of the file."""
    fd = os.open(directory / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    data = b"x" * (APPEND_BYTES - 1) + b"\n"
    samples = []
    try:
        for _ in range(n):
            started = time.perf_counter()
            os.write(fd, data)
            os.fsync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
    return samples


def run(quick: bool) -> list[Row]:
    n = 300 if quick else 1200
    blocks = 2 if quick else 4
    per_block = n // blocks
    warmup = 50
    latencies: dict[str, list[float]] = {"os": [], "fsync": [], "floor": []}
    failures = {"os": 0, "fsync": 0}
    with short_tmpdir() as tmp, Procs() as procs:
        daemons = {
            "os": product.Daemon(procs, tmp / "o", ["b", "driver"], entry="b"),
            "fsync": product.Daemon(
                procs, tmp / "f", ["b", "driver"], entry="b", run_args=["--durability", "fsync"]
            ),
        }
        try:
            for daemon in daemons.values():
                daemon.start()
            drivers = {mode: daemon.driver() for mode, daemon in daemons.items()}
            try:
                for mode, daemon in daemons.items():
                    if not daemon.wait_status(["driver"], {"idle", "processing"}, 10):
                        raise RuntimeError(f"the {mode} daemon did not take the bench's `ready`")
                offset = 0
                for block in range(blocks):
                    log(f"durability: block {block + 1}/{blocks}")
                    for mode, drv in drivers.items():

                        def payload_at(i: int, base: int = offset) -> bytes:
                            # a new conversation every 25 requests, as in figure 1
                            return product.delegate_payload(
                                "ping", f"d-{(base + i) // 25}", "driver"
                            )

                        lat, failed = drv.round_trips(
                            "b", payload_at, per_block, warmup if block == 0 else 10
                        )
                        latencies[mode].extend(lat)
                        failures[mode] += failed
                    latencies["floor"].extend(_append_fsync(tmp, per_block))
                    offset += per_block + warmup
            finally:
                for drv in drivers.values():
                    drv.close()
        finally:
            for daemon in daemons.values():
                daemon.stop()

    us = {mode: [x * 1e6 for x in samples] for mode, samples in latencies.items()}
    details: dict[str, Any] = {mode: summary(samples) for mode, samples in us.items()}
    details["failures"] = failures
    note = "" if not any(failures.values()) else f"failed requests: {failures}"
    fsync_p50 = percentile(us["fsync"], 50)
    return [
        Row(
            "9 round trip p50, --durability fsync",
            "us",
            fsync_p50,
            percentile(us["os"], 50),
            "default durability",
            goal="(reported)",
            note=note,
            details=details,
        ),
        Row(
            "9 round trip p50, --durability fsync",
            "us",
            fsync_p50,
            percentile(us["floor"], 50),
            "append + fsync",
            goal="(reported)",
        ),
        Row(
            "9 round trip p99, --durability fsync",
            "us",
            percentile(us["fsync"], 99),
            percentile(us["os"], 99),
            "default durability",
            goal="(reported)",
        ),
    ]
