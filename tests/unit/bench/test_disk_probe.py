"""The bench's quiet-disk probe makes real spares, as an agent does, and reads their cost."""

import math

from bench.procs import file_create_us


def test_the_probe_reads_the_cpu_cost_of_a_spares_files():
    cost = file_create_us(40)  # 20 spares: a directory and its events file each
    assert math.isfinite(cost) and 0 < cost < 10_000  # µs of CPU per file made
