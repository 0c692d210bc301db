"""`make bench`'s pictures: drawn from results.json as real PNGs, from samples kept small, and
without matplotlib ever loaded by `import bench` (the figures run without the `bench` extra)."""

import json
import random
import subprocess
import sys
from pathlib import Path

from bench.harness import Row, series

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = ("roundtrip", "throughput", "scale", "scale1000", "spawn")


def synthetic_results() -> dict[str, object]:
    """A results.json as the four figures write it, with made-up samples."""
    rng = random.Random(7)

    def lat(n: int, base: float) -> list[float]:
        return series([base * rng.lognormvariate(0, 0.3) for _ in range(n)])

    rows = [
        Row(
            "1 delegate round trip p50",
            "us",
            300.0,
            250.0,
            details={
                "series": {
                    "figure": "roundtrip",
                    "unit": "us",
                    "product": lat(5000, 300),
                    "bare": lat(5000, 250),
                    "orchestratorOnly": lat(500, 270),
                }
            },
        ),
        Row(
            "2 routing throughput, 2 agents",
            "msg/s",
            90_000.0,
            60_000.0,
            details={
                "series": {
                    "figure": "throughput",
                    "unit": "msg/s",
                    "agents": [2, 8, 32],
                    "product": [90_000, 80_000, 70_000],
                    "bare": [60_000, 55_000, 50_000],
                }
            },
        ),
        Row(
            "7 scale: completed",
            "",
            1000,
            1000,
            details={
                "series": {
                    "figure": "scale",
                    "unit": "ms",
                    "product": {"p50": [20.0] * 20, "p99": [40.0] * 19 + [None]},
                    "bare": {"p50": [15.0] * 20, "p99": [30.0] * 20},
                }
            },
        ),
        Row(
            "14 scale 1,000 agents: lost",
            "",
            0,
            0,
            details={
                "series": {
                    "figure": "scale1000",
                    "unit": "ms",
                    "inFlight": 200,
                    "agents": 1000,
                    "product": {"p50": [25.0] * 250, "p99": [45.0] * 250},
                    "bare": {"p50": [20.0] * 250, "p99": [35.0] * 250},
                    "orchestratorOnly": {"p50": [21.0] * 250, "p99": [36.0] * 250},
                }
            },
        ),
        Row(
            "3 spawn -> ready p50, one at a time",
            "ms",
            9.0,
            30.0,
            details={
                "series": {
                    "figure": "spawn",
                    "unit": "ms",
                    "product": {"seq": lat(10, 9), "burst8": lat(8, 20), "burst40": lat(40, 60)},
                    "subprocess": {"seq": lat(10, 30), "burst8": lat(8, 80), "burst40": []},
                    "fork": {"seq": lat(10, 4), "burst8": lat(8, 10), "burst40": lat(40, 30)},
                }
            },
        ),
        Row("5 crash -> answering p50", "ms", 9.0, 5.0),  # no series: no picture
    ]
    return {
        "machine": {"date": "2026-11-27 03:00 UTC", "nproc": 2, "cpu": "test", "quick": True},
        "rows": [row.to_json() for row in rows],
    }


def test_series_is_sorted_rounded_and_at_most_2000_points() -> None:
    samples = [float(x) + 0.123456 for x in range(10_000, 0, -1)]
    kept = series(samples, 2)
    assert len(kept) == 2000
    assert kept == sorted(kept)
    assert kept[0] == 1.12 and kept[-1] == 10_000.12  # the extremes survive the subsampling
    assert series([3.0, float("nan"), 1.0]) == [1.0, 3.0]


def test_plots_writes_a_png_per_figure_with_a_series(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(synthetic_results()))
    out = tmp_path / "img"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.plots", str(results), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{f}.png" for f in FIGURES)
    for name in FIGURES:
        data = (out / f"{name}.png").read_bytes()
        assert data.startswith(PNG_MAGIC), name
        assert len(data) > 5_000, name  # something was drawn, not an empty canvas


def test_import_bench_does_not_load_matplotlib() -> None:
    code = (
        "import sys, bench, bench.__main__, bench.harness, bench.plots\n"
        "import bench.fig_roundtrip, bench.fig_throughput, bench.fig_scale, bench.fig_spawn\n"
        "import bench.fig_scale1000\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
