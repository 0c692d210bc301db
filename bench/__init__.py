"""`make bench`: every figure of the product beside its raw baseline, measured in the same run.

Run `python -m bench [--quick] [--only NAME[,NAME]]`. Not part of `make test`. Each figure is a
module `bench/fig_*.py` with `run(ctx) -> list[Row]`; `bench/harness.py` holds the shared
percentile, table and JSON code; `bench/bare.py` the bare pyzmq broker and agents; `bench/
product.py` drives a real `goondan run` daemon through its sockets.

This module stays empty of imports: bench helper processes (`python -m bench.bare ...`) import
the package, and their start-up time is part of what some figures measure.
"""
