# ruff: noqa: E501 - cg_annotate's own lines, as it prints them
"""`python -m bench.turn_misses` counts a turn's cache misses: the difference of two cachegrind
runs, per turn, without the misses of the `memset` that empties the caches between turns."""

import subprocess
import sys

import pytest

from bench.turn_misses import per_unit

# cg_annotate's report of `cg_diff` of a 20-turn and a 60-turn run (abridged: the header and
# the first two functions, as valgrind 3.19 printed them here).
ANNOTATED = """\
--------------------------------------------------------------------------------
Files compared:   turns.20; turns.60
Events shown:     Ir I1mr ILmr D1mr DLmr D1mw DLmw
--------------------------------------------------------------------------------
Ir                     I1mr             ILmr            D1mr             DLmr             D1mw                DLmw
--------------------------------------------------------------------------------
2,697,427,260 (100.0%) 340,962 (100.0%) 97,135 (100.0%) 235,835 (100.0%) 108,167 (100.0%) 41,964,097 (100.0%) 41,953,836 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                     I1mr            ILmr            D1mr            DLmr            D1mw                DLmw                 file:function
--------------------------------------------------------------------------------
2,684,431,182 (99.52%)  1,652 ( 0.48%)    200 ( 0.21%)    266 ( 0.11%)     80 ( 0.07%) 41,945,674 (99.96%) 41,944,582 (99.98%)  ./string/../sysdeps/x86_64/multiarch/memset-vec-unaligned-erms.S:__memset_avx2_unaligned_erms
    3,023,857 ( 0.11%) 61,801 (18.13%) 13,214 (13.60%) 65,550 (27.79%) 33,976 (31.41%)      1,860 ( 0.00%)        761 ( 0.00%)  Python/generated_cases.c.h:_PyEval_EvalFrameDefault
"""


def test_the_counts_are_per_turn_without_the_eviction() -> None:
    counts = per_unit(ANNOTATED, 40)
    assert counts["Ir"] == (2_697_427_260 - 2_684_431_182) / 40
    assert counts["ILmr"] == (97_135 - 200) / 40
    assert counts["DLmr"] == (108_167 - 80) / 40
    assert counts["DLmw"] == (41_953_836 - 41_944_582) / 40


@pytest.mark.parametrize("diagnostic", ["bench.turn_misses", "bench.agent_misses"])
def test_a_negative_eviction_is_refused_with_what_is_wrong(diagnostic: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", diagnostic, "--evict", "-1"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "--evict" in proc.stderr and "Traceback" not in proc.stderr


def test_the_counted_child_runs_the_product_s_turns() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.turn_misses", "--child", "12", "--evict", "1"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
