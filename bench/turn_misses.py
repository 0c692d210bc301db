"""A diagnostic, not a figure: a turn's cache misses, counted by valgrind's cachegrind.

    .venv/bin/python -m bench.turn_misses [--evict MIB]

Runs `bench.turn_cold`'s turn (the product's `run_turn`, the scripted model answering at once,
a new conversation every tenth turn) under cachegrind twice, 20 and 60 turns, with `MIB` MiB
written by `memset` before each turn (default 64, twice the simulated last-level cache), and
prints per turn the difference of the two: instructions, and the misses of the first-level and
the last-level caches, for instructions and for data, `memset`'s own left out. The caches are
simulated as this machine's: 32 KiB first level, a 32 MiB last level.

Counted, not timed: the same code gives the same counts whatever else the machine does, to
within a few misses, where timing a cold turn takes many runs and still moves by ±15 µs. At
1,000 agents every turn is cold, and a last-level miss costs ~50 ns of the turn
(docs/performance.md, figure 14, "A plain turn"): fewer misses is a cheaper turn at scale.
Needs valgrind (Debian's `valgrind` package); takes about half a minute.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from bench.turn_cold import run_turns

FEW, MANY = 20, 60  # turns (or delegates) per run: their difference leaves out start and end
CACHES = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=33554432,16,64"]
EVENTS = ["Ir", "I1mr", "ILmr", "D1mr", "DLmr", "D1mw", "DLmw"]


def _child(turns: int, evict_mib: int) -> None:
    """The turns cachegrind watches: `memset` before each, so its misses are apart."""
    other = ctypes.create_string_buffer(evict_mib * 1024 * 1024)

    def evict(n: int) -> None:
        ctypes.memset(other, n & 0xFF, len(other))

    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        uvloop.run(run_turns(Path(tmp), turns, evict))


def _under_cachegrind(command: list[str], out: Path) -> subprocess.Popen[bytes]:
    # The same hashes in both runs: dict and set layouts, so the same memory touched.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    counted = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", *CACHES]
    return subprocess.Popen(
        [*counted, f"--cachegrind-out-file={out}", *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


Driver = Callable[[subprocess.Popen[bytes]], None]


def count_per_unit(
    commands: tuple[list[str], list[str]], units: int, drivers: tuple[Driver, Driver] | None = None
) -> dict[str, float]:
    """Runs the two commands (a run of FEW units and one of MANY) under cachegrind at once and
    returns the counts of their difference per unit (`units` = MANY - FEW). `drivers`, when
    given, each runs in a thread beside its run (given its process) and raises if it fails."""
    failures: list[BaseException] = []

    def drive(driver: Driver, run: subprocess.Popen[bytes]) -> None:
        try:
            driver(run)
        except BaseException as exc:  # noqa: BLE001 - raised again by the caller's thread
            failures.append(exc)
            run.kill()

    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"run.{n}" for n in (FEW, MANY)]
        runs = [_under_cachegrind(c, out) for c, out in zip(commands, outs, strict=True)]
        driven = zip(drivers, runs, strict=True) if drivers is not None else ()
        threads = [threading.Thread(target=drive, args=pair) for pair in driven]
        for thread in threads:
            thread.start()
        errors = [run.communicate()[1] for run in runs]
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        for run, err in zip(runs, errors, strict=True):
            if run.returncode != 0:
                sys.exit(f"cachegrind failed:\n{err.decode(errors='replace')[-2000:]}")
        diff = Path(tmp) / "runs.diff"
        with diff.open("w") as out:
            subprocess.run(["cg_diff", *map(str, outs)], stdout=out, check=True)
        annotated = subprocess.run(
            ["cg_annotate", "--auto=no", f"--show={','.join(EVENTS)}", str(diff)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return per_unit(annotated, units)


def last_level(counts: dict[str, float]) -> float:
    """The last-level misses: instructions' and data's, read and written."""
    return counts["ILmr"] + counts["DLmr"] + counts["DLmw"]


def print_counts(unit: str, evict_mib: int, counts: dict[str, float]) -> None:
    print(f"per {unit}, after {evict_mib} MiB written (simulated caches: {' '.join(CACHES)}):")
    print("  " + "  ".join(f"{e} {counts[e]:,.0f}" for e in EVENTS))
    print(f"  last-level misses {last_level(counts):,.0f}")


def per_unit(annotated: str, units: int) -> dict[str, float]:
    """Per turn (or delegate), from `cg_annotate` of the difference of two runs: the totals less
    the lines of `memset` (the eviction's)."""
    totals: list[int] | None = None
    evicting = [0] * len(EVENTS)
    for line in annotated.splitlines():
        if "PROGRAM TOTALS" not in line and "memset" not in line:
            continue
        words = [w.replace(",", "") for w in line.split()]  # "1,652 ( 0.48%)": counts only
        counts = [int(w) for w in words if w.lstrip("-").isdigit()][: len(EVENTS)]
        if "PROGRAM TOTALS" in line:
            totals = counts
        else:
            evicting = [a + b for a, b in zip(evicting, counts, strict=True)]
    if totals is None:
        raise RuntimeError("cg_annotate printed no program totals")
    return {e: (t - m) / units for e, t, m in zip(EVENTS, totals, evicting, strict=True)}


def require_valgrind(parser: argparse.ArgumentParser) -> None:
    """Exit with a usage error naming what is missing unless valgrind's tools are there."""
    missing = [tool for tool in ("valgrind", "cg_diff", "cg_annotate") if not shutil.which(tool)]
    if missing:
        parser.error(f"{', '.join(missing)} not found: install Debian's valgrind package")


def parse_arguments(prog: str, doc: str | None, unit: str, **child: Any) -> argparse.Namespace:
    """`--evict MIB` (checked), and `--child` (hidden, `child` its `add_argument` keywords)
    for the process cachegrind counts; without `--child`, valgrind's tools must be there."""
    parser = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--evict",
        type=int,
        default=64,
        metavar="MIB",
        help=f"MiB written to before each {unit} (default: 64; 0: warm caches)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS, **child)
    args = parser.parse_args()
    if args.evict < 0:
        parser.error(f"--evict takes MiB, 0 or more, not {args.evict}")
    if args.child is None:
        require_valgrind(parser)
    return args


def main() -> None:
    args = parse_arguments("python -m bench.turn_misses", __doc__, "turn", type=int)
    if args.child is not None:
        _child(args.child, args.evict)
        return
    child = [sys.executable, "-m", "bench.turn_misses", "--evict", str(args.evict), "--child"]
    counts = count_per_unit(([*child, str(FEW)], [*child, str(MANY)]), MANY - FEW)
    print_counts("turn", args.evict, counts)


if __name__ == "__main__":
    main()
