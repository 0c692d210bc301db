"""`python -m bench [--quick] [--only NAME[,NAME]] [--json PATH]`: run the figures, print the
table (stdout), write `bench/results.json` and the pictures (`bench/plots.py`): those of a full
run to `bench/plots/`, where the committed ones are, and those of a `--quick` or `--only` run to
`bench/plots-partial/`, so that trying one figure cannot replace them. Progress goes to
stderr.

Figures: roundtrip, throughput, spawn, memory, crash, dispatch, scale, scale1000, touch,
durability, coldstart, otel, ray, frontdoor.

Exits 1 when a correctness check failed (a scale run lost a delegate or got a wrong answer),
after writing the table and results.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from bench.harness import (
    Row,
    describe_machine,
    failed_row,
    fmt,
    log,
    machine,
    render_table,
)
from bench.procs import QUIET_FILE_CREATE_US, wait_for_quiet_disk

FIGURES = {
    "roundtrip": "bench.fig_roundtrip",
    "throughput": "bench.fig_throughput",
    "spawn": "bench.fig_spawn",
    "memory": "bench.fig_memory",
    "crash": "bench.fig_crash",
    "dispatch": "bench.fig_dispatch",
    "scale": "bench.fig_scale",
    "scale1000": "bench.fig_scale1000",
    "touch": "bench.fig_touch",
    "durability": "bench.fig_durability",
    "coldstart": "bench.fig_coldstart",
    "otel": "bench.fig_otel",
    "ray": "bench.fig_ray",
    "frontdoor": "bench.fig_frontdoor",
}
GOALS = {
    "roundtrip": "<= 2x bare",
    "throughput": ">= 0.6x bare",
    "spawn": "<= 25 ms",
    "memory": "<= 10 MiB",
    "crash": "<= 50 ms",
    "dispatch": "overhead <= 20 us",
    "scale": "0 lost, p99 <= 1.25x bare",
    "scale1000": "0 lost, p99 <= 1.3x bare, idle PSS <= 7 MiB",
    "touch": "(diagnostic)",
    "durability": "(reported)",
    "coldstart": "<= 0.5 s",
    "otel": "<= 1.25x off",
    "ray": "(reported)",
    "frontdoor": "<= 2x bare",
}
DEFAULT_JSON = Path(__file__).resolve().parent / "results.json"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks of goondan, each figure beside its raw baseline in the same run.",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated figures to run (of: {', '.join(FIGURES)})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer samples and smaller runs (about a minute)"
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    args = parser.parse_args(argv)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in FIGURES]
        if unknown:
            parser.error(
                f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}"
            )
        args.figures = names
    else:
        args.figures = list(FIGURES)
    return args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # Unwind through every figure's `finally`, which kills the processes it started.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    info = machine()
    log(f"machine: {info['nproc']} vCPU {info['cpu']}, Python {info['python']}")
    full_run = not args.quick and not args.only  # `--only scale` waits on its own
    if info["fileCreateUs"] > QUIET_FILE_CREATE_US:
        log(
            f"creating a file costs {info['fileCreateUs']:.0f} us of CPU here (usually "
            "20-50): the file system is still paying for files deleted in the last minutes "
            "(ext4 without a journal)" + ("; waiting for it to settle" if full_run else "")
        )
        if full_run:
            # Every figure that starts conversations pays for it (figure 1's first requests
            # most of all); the figures' state is deleted when the bench exits: once is enough.
            cost, info["waitedForQuietDiskS"] = wait_for_quiet_disk()
            info["fileCreateUs"] = round(cost, 1)
            log(f"a new file costs {info['fileCreateUs']:.0f} us of CPU now")
    rows: list[Row] = []
    timings: dict[str, float] = {}
    load: dict[str, float] = {}
    started = time.monotonic()
    for name in args.figures:
        log(f"figure {name}{' (quick)' if args.quick else ''}")
        t0 = time.monotonic()
        load[name] = round(os.getloadavg()[0], 2)
        try:
            module = importlib.import_module(FIGURES[name])
            rows.extend(module.run(args.quick))
        except KeyboardInterrupt:
            log("interrupted")
            return 130
        except Exception as exc:  # one broken figure must not hide the others
            traceback.print_exc(file=sys.stderr)
            row = failed_row(name, f"not measured: {type(exc).__name__}: {exc}", GOALS[name])
            # A scale run that broke off may have lost delegates: fail loudly, as a loss does.
            row.correctness = name in ("scale", "scale1000")
            rows.append(row)
        timings[name] = round(time.monotonic() - t0, 1)
    info["loadavgEnd"] = os.getloadavg()[0]
    info["seconds"] = round(time.monotonic() - started, 1)
    info["quick"] = args.quick
    table = render_table(rows)
    print(f"Machine: {describe_machine(info)}\n")
    print(table)
    met = [r for r in rows if r.met is True]
    missed = [r for r in rows if r.met is False]
    print(f"\n{len(met)} goals met, {len(missed)} missed; {info['seconds']:.0f} s in all.")
    results = {
        "machine": info,
        "secondsPerFigure": timings,
        "loadavgBeforeFigure": load,
        "rows": [r.to_json() for r in rows],
    }
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    log(f"wrote {args.json}")
    _plots(results, full=not args.quick and args.figures == list(FIGURES))
    broken = [r for r in rows if r.correctness and r.met is not True]
    for row in broken:
        log(f"FAILED: {row.figure}: {fmt(row.product, row.unit)} (goal {row.goal}) {row.note}")
    return 1 if broken else 0


def _plots(results: dict[str, Any], *, full: bool) -> None:
    """The pictures of the figures that ran; without matplotlib (the `bench` extra) the table
    and results.json are still whole, so say so and go on."""
    try:
        from bench import plots

        out_dir = plots.OUT_DIR if full else plots.PARTIAL_DIR
        for path in plots.render(results, out_dir):
            log(f"wrote {path}")
    except ImportError as exc:
        log(f"no pictures: {exc} (pip install -e '.[bench]')")


if __name__ == "__main__":
    raise SystemExit(main())
