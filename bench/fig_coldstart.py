"""Figure 10: a cold `goondan run --input`, from exec to the reply on stdout.

Product: `goondan run configs/quickstart --input "What is 19 plus 23?"`, the offline
quickstart (two scripted agents, two tools, one delegation between the agents), each run in a
state root of its own (no conversation, no journal); the time from Popen to the first line on
its stdout (the reply). Baseline, in the same run and alternating with it: `python -c "import
goondan"` from Popen to its exit, the floor of any command of the CLI. Median and p90 of the
runs.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from bench.harness import Row, log, percentile
from bench.procs import PYTHON, bench_env, short_tmpdir

NAME = "coldstart"
GOAL_S = 0.5
QUICKSTART = Path(__file__).resolve().parent.parent / "configs" / "quickstart"
INPUT = "What is 19 plus 23?"
EXPECTED = "19 plus 23 is 42"


def _product(state_root: Path) -> float:
    started = time.monotonic()
    with subprocess.Popen(
        [PYTHON, "-m", "goondan.cli.main", "run", str(QUICKSTART), "--input", INPUT,
         "--state-root", str(state_root)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=bench_env(),
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        reply = proc.stdout.readline()
        elapsed = time.monotonic() - started
        proc.stdout.read()
        if proc.wait(timeout=60) != 0 or not reply.decode().startswith(EXPECTED):
            raise RuntimeError(f"goondan run answered {reply!r} (exit {proc.returncode})")
    return elapsed


def _baseline() -> float:
    started = time.monotonic()
    subprocess.run([PYTHON, "-c", "import goondan"], check=True, env=bench_env())
    return time.monotonic() - started


def run(quick: bool) -> list[Row]:
    runs = 5 if quick else 11
    product: list[float] = []
    bare: list[float] = []
    with short_tmpdir() as tmp:
        _product(tmp / "warm")  # the page cache, not the product, is cold on the first run
        log(f"coldstart: {runs} runs of each, alternating")
        for i in range(runs):
            bare.append(_baseline())
            product.append(_product(tmp / f"s{i}"))
    details = {"productS": product, "baselineS": bare}
    note = (
        f"p90 {percentile(product, 90):.2f} s (import goondan p90 "
        f"{percentile(bare, 90):.2f} s); {runs} runs each, a fresh state root per run"
    )
    return [
        Row(
            "10 cold run --input, exec -> reply p50",
            "s",
            percentile(product, 50),
            percentile(bare, 50),
            "python -c 'import goondan'",
            goal=f"<= {GOAL_S:g} s",
            judge=lambda p, b, r: p <= GOAL_S,
            note=note,
            details=details,
        ),
        Row(
            "10 cold run --input, exec -> reply p90",
            "s",
            percentile(product, 90),
            percentile(bare, 90),
            "python -c 'import goondan'",
            goal="(reported)",
        ),
    ]
