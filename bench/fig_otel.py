"""Figure 11: the delegate round trip of figure 1 with OpenTelemetry export on, beside off.

Two real daemons, the same bundle: one with `OTEL_TRACES_EXPORTER=otlp` exporting to a local
sink collector (`bench/otlp_sink.py`, its own process), one with it off. The driver asks the
scripted agent B of each in turn, in alternating blocks, so load from other work falls on both.
With export on, B's turn and step become spans, each sent to its orchestrator as it ends, and
exported from there in batches. The cost of export off is the roundtrip figure itself (no SDK
is imported, a `None` check per runtime event).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

from bench import product
from bench.harness import Row, log, percentile, summary
from bench.procs import PYTHON, Procs, short_tmpdir

NAME = "otel"


def run(quick: bool) -> list[Row]:
    n = 400 if quick else 1500
    blocks = 2 if quick else 3
    per_block = n // blocks
    warmup = 100
    on_lat: list[float] = []
    off_lat: list[float] = []
    failures = {"on": 0, "off": 0}

    def payload_for(i: int) -> bytes:
        return product.delegate_payload("ping", f"ot-{i // 25}", "driver")

    with short_tmpdir() as tmp, Procs() as procs:
        sink = procs.spawn([PYTHON, "-m", "bench.otlp_sink"], stdout=subprocess.PIPE, text=True)
        assert sink.stdout is not None
        sink_url = f"http://127.0.0.1:{int(sink.stdout.readline())}"
        otel = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink_url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
        on = product.Daemon(procs, tmp / "on", ["b", "driver"], entry="b", env=otel)
        off = product.Daemon(
            procs, tmp / "off", ["b", "driver"], entry="b", env={"OTEL_TRACES_EXPORTER": "none"}
        )
        try:
            on.start()
            off.start()
            with on.driver() as on_drv, off.driver() as off_drv:
                for drv in (on_drv, off_drv):
                    drv.round_trips("b", payload_for, 1, 20)  # starts B
                offset = 0
                for block in range(blocks):
                    log(f"otel: block {block + 1}/{blocks}")
                    for drv, samples, arm in (
                        (on_drv, on_lat, "on"),
                        (off_drv, off_lat, "off"),
                    ):
                        base = offset

                        def payload_at(i: int, base: int = base) -> bytes:
                            return payload_for(base + i)

                        lat, failed = drv.round_trips(
                            "b", payload_at, per_block, warmup if block == 0 else 20
                        )
                        samples.extend(lat)
                        failures[arm] += failed
                    offset += per_block + warmup
            time.sleep(6)  # the batch processor's schedule delay: the last spans leave
            with urllib.request.urlopen(sink_url, timeout=5) as response:
                received = json.loads(response.read())
        finally:
            on.stop()
            off.stop()

    on_us = [x * 1e6 for x in on_lat]
    off_us = [x * 1e6 for x in off_lat]
    details = {
        "on": summary(on_us),
        "off": summary(off_us),
        "failures": failures,
        "sink": received,
        "path": "driver -> orchestrator -> agent b (scripted, no tools: a turn and a step "
        "span) -> orchestrator -> driver; export on: OTLP/HTTP to a local sink",
    }
    note = "" if not any(failures.values()) else f"failed requests: {failures}"
    if not received["requests"]:
        note = (note + "; " if note else "") + "the sink received nothing"
    return [
        Row(
            "11 round trip p50, OTLP export on",
            "us",
            percentile(on_us, 50),
            percentile(off_us, 50),
            "export off",
            goal="<= 1.25x off",
            judge=lambda p, b, r: r is not None and r <= 1.25 and bool(received["requests"]),
            note=note,
            details=details,
        ),
    ]
