"""The template fills its half-used pymalloc pools, so that what a child allocates comes packed
from fresh pool space rather than from holes among the template's long-lived objects."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agentproc.fresh_pools import fill_partial_pools

# As in the template: the agent runtime imported, then the fill. Which size classes hand out
# 8 new objects one right after the other? (A while loop: an iterator would be an object of
# size class 2 itself.)
PACKED = """
import json
import agentproc.main
from agentproc.fresh_pools import SIZE_CLASSES, allocate, block_size, fill_partial_pools, is_packed

def unpacked():
    classes, size_class = [], 0
    while size_class < SIZE_CLASSES:
        if not is_packed(allocate(size_class), block_size(size_class)):
            classes.append(size_class)
        size_class += 1
    return classes

before = unpacked()
filler = fill_partial_pools()
print(json.dumps({"before": before, "after": unpacked(), "filler": len(filler)}))
"""


def test_after_the_fill_the_size_classes_hand_out_packed_objects() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PACKED],
        env={k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert len(result["before"]) >= 8  # imports leave holes in most size classes
    # All but the smallest classes: the ints and iterators the fill and this check make come
    # and go there, between the objects, and so do the lists each batch is held in (64 bytes
    # and their 8 items' 64: size class 3, where a few seeds of the hash leave a stray hole).
    assert set(result["after"]) <= {0, 1, 2, 3}
    assert 0 < result["filler"] < 100_000  # held by the caller, so the holes stay filled


def test_the_fill_does_nothing_without_pymalloc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONMALLOC", "malloc")
    assert fill_partial_pools() == []
