"""Shared by every figure: percentiles, the result row, the table, the machine, the JSON file."""

from __future__ import annotations

import datetime
import math
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.procs import file_create_us


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted samples; NaN when empty."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(samples: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max/mean and the count, for the JSON file."""
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "p50": percentile(samples, 50),
        "p90": percentile(samples, 90),
        "p99": percentile(samples, 99),
        "max": max(samples),
        "mean": sum(samples) / len(samples),
    }


SERIES_POINTS = 2000


def series(samples: Sequence[float], digits: int = 1, points: int = SERIES_POINTS) -> list[float]:
    """Samples for the pictures (bench/plots.py), sorted, rounded and evenly subsampled to at
    most `points` (the smallest and largest kept), so results.json stays small while a CDF or a
    box drawn from them keeps its shape."""
    ordered = sorted(x for x in samples if math.isfinite(x))
    if len(ordered) > points > 1:
        last = len(ordered) - 1
        ordered = [ordered[round(i * last / (points - 1))] for i in range(points)]
    return [round(x, digits) for x in ordered]


@dataclass
class Row:
    """One line of the table: a product figure beside its baseline, and the goal."""

    figure: str  # e.g. "1 delegate round trip p50"
    unit: str  # "us", "ms", "msg/s", "MB", ...
    product: float | None
    baseline: float | None = None
    baseline_name: str = ""
    goal: str = ""
    # How the goal is judged: given (product, baseline, ratio) -> met?  None: no goal.
    judge: Callable[[float, float | None, float | None], bool] | None = None
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # A correctness check (nothing lost, every answer right): when it is not met the bench
    # says so on stderr and exits non-zero, whatever the timed goals say.
    correctness: bool = False

    @property
    def ratio(self) -> float | None:
        if self.product is None or self.baseline is None or self.baseline == 0:
            return None
        return self.product / self.baseline

    @property
    def met(self) -> bool | None:
        if self.judge is None:
            return None
        if self.product is None or (isinstance(self.product, float) and math.isnan(self.product)):
            return False
        return bool(self.judge(self.product, self.baseline, self.ratio))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("judge")
        data["ratio"] = self.ratio
        data["met"] = self.met
        cleaned: dict[str, Any] = _clean(data)
        return cleaned


def failed_row(figure: str, error: str, goal: str = "") -> Row:
    """A figure that could not be measured: shown in the table as not met, with the reason."""
    return Row(figure, "", None, goal=goal, judge=(lambda p, b, r: False), note=error)


def _clean(value: Any) -> Any:
    """JSON has no NaN: make it null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def fmt(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("msg/s", "req/s"):
        text = f"{value / 1000:.1f} k"
    elif unit == "" and float(value).is_integer():
        text = f"{int(value):,}"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def render_table(rows: Sequence[Row]) -> str:
    """A GitHub-flavoured Markdown table: readable on a terminal and pasteable in the README."""
    header = ["figure", "product", "baseline", "ratio", "goal", "met?"]
    lines = [header]
    for row in rows:
        baseline = fmt(row.baseline, row.unit)
        if row.baseline is not None and row.baseline_name:
            baseline = f"{baseline} ({row.baseline_name})"
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        met = {True: "yes", False: "**no**", None: "-"}[row.met]
        lines.append([row.figure, fmt(row.product, row.unit), baseline, ratio, row.goal, met])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]

    def render(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [render(lines[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(render(line) for line in lines[1:])
    notes = [f"- {row.figure}: {row.note}" for row in rows if row.note]
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out)


def machine() -> dict[str, Any]:
    import msgspec
    import uvloop
    import zmq

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_total = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memGiB": mem_total,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
        "msgspec": msgspec.__version__,
        "uvloop": getattr(uvloop, "__version__", "?"),
        "loadavgStart": os.getloadavg()[0],
        "fileCreateUs": round(file_create_us(), 1),
    }


def describe_machine(info: dict[str, Any]) -> str:
    waited = info.get("waitedForQuietDiskS")
    wait_note = f" (after waiting {waited:.0f} s for it)" if waited else ""
    return (
        f"{info['date']}; {info['nproc']} vCPU {info['cpu']}, {info['memGiB']} GiB, "
        f"kernel {info['kernel']}; Python {info['python']}, pyzmq {info['pyzmq']} "
        f"(libzmq {info['libzmq']}), msgspec {info['msgspec']}, uvloop {info['uvloop']}; "
        f"load average {info['loadavgStart']:.2f} at start, "
        f"{info.get('loadavgEnd', 0):.2f} at end; a new file {info['fileCreateUs']:.0f} us of CPU"
        f"{wait_note}"
    )


def log(message: str) -> None:
    """Progress goes to stderr; the table goes to stdout."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)
