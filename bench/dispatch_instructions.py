"""A diagnostic, not a figure: figure 6's tool dispatch, counted in instructions by cachegrind.

    .venv/bin/python -m bench.dispatch_instructions

Runs figure 6's two paths in this interpreter under valgrind's cachegrind: the product's (a
`toolCall` context through 3 pass-through middleware layers into `ToolExecutor.invoke`, on the
tool `bench.fig_dispatch` loads the product's way) and the baseline's (`await handler(ctx,
args)`), each twice, 10,000 and 30,000 calls, and prints per call the difference of the two
runs: the instructions of each path and the product's overhead over the baseline.

Counted, not timed: the same code gives the same count to within ~30 instructions per call
however busy the machine is, where the shared 2-vCPU VM's clock moves figure 6 by 1.2-1.8x
from one minute to the next. So a change to the dispatch path can be judged in one run, by how
many instructions it takes off (docs/performance.md, "Figure 6, dispatch"). Needs valgrind
(Debian's `valgrind` package); takes about a minute.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvloop

from bench.fig_dispatch import dispatcher, setup
from bench.procs import short_tmpdir
from bench.turn_misses import count_per_unit, require_valgrind

FEW, MANY = 10_000, 30_000  # calls per run: their difference leaves out start and end
PATHS = ("product", "direct")


def _child(path: str, calls: int) -> None:
    """The calls cachegrind counts, on uvloop as figure 6 runs them."""
    with short_tmpdir() as tmp:
        registry, call, ctx, handler = setup(Path(tmp))
        args = {"n": 1}
        dispatch = dispatcher(registry, call, ctx)

        async def product() -> None:
            first = await dispatch()  # in both runs: it cancels out
            if first.status != "ok":
                sys.exit(f"the tool call failed: {first}")
            for _ in range(calls):
                await dispatch()

        async def direct() -> None:
            for _ in range(calls):
                await handler(ctx, args)

        uvloop.run(product() if path == "product" else direct())


def instructions_per_call(path: str) -> float:
    child = [sys.executable, "-m", "bench.dispatch_instructions", "--child", path]
    counts = count_per_unit(([*child, str(FEW)], [*child, str(MANY)]), MANY - FEW)
    return counts["Ir"]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dispatch_instructions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--child", nargs=2, metavar=("PATH", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        path, calls = args.child
        if path not in PATHS or not calls.isdigit():
            parser.error(f"--child takes one of {', '.join(PATHS)} and a count of calls")
        _child(path, int(calls))
        return
    require_valgrind(parser)
    product = instructions_per_call("product")
    direct = instructions_per_call("direct")
    print("figure 6's paths, instructions per call (the difference of 10,000 and 30,000 calls):")
    print(f"  product (3 middleware layers, invoke) {product:,.0f}")
    print(f"  direct await                          {direct:,.0f}")
    print(f"  overhead                              {product - direct:,.0f}")


if __name__ == "__main__":
    main()
