"""`python -m bench.plots [results.json] [--out DIR]`: draw `make bench`'s pictures as PNGs.

One picture per figure that kept its samples in results.json (a `series` in a row's details,
naming its figure): the round trip's latency CDF, throughput by agent count, the scale runs'
p50/p99 per wave (200 agents, and 1,000 in `scale1000.png`) and the spawn times.
`python -m bench` calls `render` at its end.

A full run's PNGs go to `bench/plots/`. The docs site (mkdocs serves only `docs/`) shows them
on the performance page through `docs/img/bench`, a symlink to that directory: one copy in git,
which cannot drift from another. A `--quick` or `--only` run's go to `bench/plots-partial/`
(ignored by git), so that they cannot replace the committed ones.

matplotlib (the `bench` extra) is imported here only, with the Agg backend (no display), so
`import bench` and every figure run without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import log

OUT_DIR = Path(__file__).resolve().parent / "plots"  # a full run's: committed, in the docs
PARTIAL_DIR = Path(__file__).resolve().parent / "plots-partial"  # --quick / --only runs'
DEFAULT_JSON = Path(__file__).resolve().parent / "results.json"
PRODUCT, BASELINE, OTHER = "#1f77b4", "#7f7f7f", "#ff7f0e"


def find_series(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The series each figure kept, by figure name."""
    found: dict[str, dict[str, Any]] = {}
    for row in results.get("rows", []):
        data = (row.get("details") or {}).get("series")
        if isinstance(data, dict) and isinstance(data.get("figure"), str):
            found[data["figure"]] = data
    return found


def _cdf(ax: Any, samples: list[float], label: str, color: str, style: str = "-") -> None:
    if not samples:
        return
    n = len(samples)
    ax.plot(samples, [(i + 1) / n for i in range(n)], style, color=color, label=label)


def _roundtrip(ax: Any, data: dict[str, Any]) -> None:
    _cdf(ax, data.get("product", []), "product", PRODUCT)
    _cdf(ax, data.get("bare", []), "bare broker", BASELINE)
    _cdf(ax, data.get("orchestratorOnly", []), "real orchestrator + bare B", OTHER, "--")
    ax.set_xscale("log")
    ax.set_xlabel(f"round trip ({data.get('unit', 'us')}, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("1 delegate round trip: latency CDF")
    for q in (0.5, 0.99):
        ax.axhline(q, color="#cccccc", linewidth=0.8, zorder=0)


def _throughput(ax: Any, data: dict[str, Any]) -> None:
    agents = [str(n) for n in data.get("agents", [])]
    xs = list(range(len(agents)))
    width = 0.38
    ax.bar(
        [x - width / 2 for x in xs], data.get("product", []), width, label="product", color=PRODUCT
    )
    ax.bar(
        [x + width / 2 for x in xs],
        data.get("bare", []),
        width,
        label="bare broker",
        color=BASELINE,
    )
    ax.set_xticks(xs, agents)
    ax.set_xlabel("agents (1,000 delegates in flight in all)")
    ax.set_ylabel(f"routed messages per second ({data.get('unit', 'msg/s')})")
    ax.set_title("2 routing throughput by agent count")


def _waves(ax: Any, data: dict[str, Any], title: str, xlabel: str) -> None:
    arms = (
        ("product", "product", PRODUCT),
        ("bare", "bare broker", BASELINE),
        ("bareForked", "bare broker, agents forked", "#9467bd"),
        ("orchestratorOnly", "real orchestrator + bare agents", OTHER),
        ("productStateOnTmpfs", "product, state on tmpfs", "#2ca02c"),
    )
    for key, label, color in arms:
        arm = data.get(key)
        if not arm:
            continue
        waves = list(range(1, len(arm.get("p99", [])) + 1))
        ax.plot(waves, arm.get("p99", []), "-", color=color, label=f"{label} p99")
        ax.plot(waves, arm.get("p50", []), ":", color=color, label=f"{label} p50")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"latency in the wave ({data.get('unit', 'ms')})")
    ax.set_title(title)


def _scale(ax: Any, data: dict[str, Any]) -> None:
    _waves(ax, data, "7 scale: p50 and p99 of each wave", "measured wave")


def _scale1000(ax: Any, data: dict[str, Any]) -> None:
    in_flight = data.get("inFlight", "?")
    agents = data.get("agents", 1000)
    _waves(
        ax,
        data,
        f"14 scale, {agents:,} agents: p50 and p99 of each wave",
        f"measured wave ({in_flight} delegates in flight, a round of waves reaches every agent)",
    )


def _spawn(ax: Any, data: dict[str, Any]) -> None:
    arms = (("product", "product"), ("subprocess", "python -c zmq"), ("fork", "os.fork"))
    groups = sorted(
        {k for arm, _ in arms for k in (data.get(arm) or {})},
        key=lambda k: (k != "seq", int(k.removeprefix("burst")) if k != "seq" else 0),
    )
    boxes, labels, colors = [], [], []
    for group in groups:
        for arm, name in arms:
            samples = (data.get(arm) or {}).get(group)
            if samples:
                boxes.append(samples)
                when = (
                    "one at a time" if group == "seq" else f"{group.removeprefix('burst')} at once"
                )
                labels.append(f"{name}\n{when}")
                colors.append({"product": PRODUCT, "subprocess": BASELINE}.get(arm, "#d0d0d0"))
    if boxes:
        parts = ax.boxplot(boxes, patch_artist=True, showfliers=True)
        for patch, color in zip(parts["boxes"], colors, strict=True):
            patch.set_facecolor(color)
            patch.set_alpha(0.6)
        ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
    ax.set_ylabel(f"spawn -> ready ({data.get('unit', 'ms')})")
    ax.set_title("3 spawn times")


DRAW: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "roundtrip": _roundtrip,
    "throughput": _throughput,
    "scale": _scale,
    "scale1000": _scale1000,
    "spawn": _spawn,
}


def render(results: dict[str, Any], out_dir: Path = OUT_DIR) -> list[Path]:
    """Write one PNG per figure with a series; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machine = results.get("machine") or {}
    caption = (
        f"{machine.get('date', '?')}, {machine.get('nproc', '?')} vCPU "
        f"{machine.get('cpu', '?')}{', --quick' if machine.get('quick') else ''}"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in find_series(results).items():
        draw = DRAW.get(name)
        if draw is None:
            continue
        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
        try:
            draw(ax, data)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
            fig.text(0.99, 0.01, caption, ha="right", va="bottom", fontsize=7, color="#666666")
            fig.tight_layout()
            path = out_dir / f"{name}.png"
            fig.savefig(path)
            written.append(path)
        finally:
            plt.close(fig)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__)
    parser.add_argument("results", nargs="?", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="where the PNGs go")
    args = parser.parse_args(argv)
    try:
        results = json.loads(args.results.read_text())
    except (OSError, ValueError) as exc:
        print(f"cannot read {args.results}: {exc}", file=sys.stderr)
        return 1
    for path in render(results, args.out):
        log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
