"""The template makes its objects immortal before it forks: a child that uses them copies none
of their pages (CPython 3.12 and 3.13), and elsewhere nothing changes."""

from __future__ import annotations

import json
import subprocess
import sys

from agentproc.immortal_heap import Immortalizer, supported

# As in the template: objects made, then (or not) made immortal, frozen, and a fork whose
# child takes and drops a reference to each, as a turn does to the code, functions and
# constants it runs. The child reports how much of its memory became its own meanwhile.
USE_AFTER_FORK = """
import gc, json, os, sys
from agentproc.immortal_heap import Immortalizer

def private_kib():
    kib = 0
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            kib += int(line.split()[1])
    return kib

objects = [[n] for n in range(40_000)]  # ~3 MiB of lists, each in its own small block
gc.collect()
immortalizer = Immortalizer()
if sys.argv[1] == "immortal":
    assert immortalizer.run(lambda: False)
made = immortalizer.made
gc.freeze()
read, write = os.pipe()
if os.fork() == 0:
    before = private_kib()
    for item in objects:
        held = item  # a reference taken, and dropped at the next one
    held = None
    os.write(write, json.dumps({"copiedKiB": private_kib() - before}).encode())
    os._exit(0)
os.wait()
child = json.loads(os.read(read, 4096))
print(json.dumps({"made": made, "count": sys.getrefcount(objects[7]), **child}))
"""


def _use_after_fork(mode: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", USE_AFTER_FORK, mode],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, int] = json.loads(done.stdout)
    return result


def test_a_child_that_uses_the_templates_objects_copies_their_pages_only_if_mortal() -> None:
    mortal = _use_after_fork("mortal")
    immortal = _use_after_fork("immortal")
    assert mortal["made"] == 0
    assert mortal["copiedKiB"] >= 2_000  # every page of the lists, copied on its first write
    if supported():
        assert immortal["made"] >= 40_000  # the lists, and all the rest the template holds
        assert immortal["copiedKiB"] < 500  # the child's own stack, frames and objects
        assert immortal["count"] > 2**31  # (and taking a reference no longer counts)
    else:  # another interpreter or layout: left alone
        assert immortal["made"] == 0
        assert immortal["copiedKiB"] >= 2_000


# What a child of the template does with its objects: mutate them, drop them, collect.
STILL_WORKS = """
import gc
from agentproc.immortal_heap import Immortalizer

class Node:
    def __init__(self, peer):
        self.peer = peer

table = {"a": [1, 2]}
ring = Node(None)
ring.peer = Node(ring)  # a cycle
gc.collect()
Immortalizer().run(lambda: False)
gc.freeze()
table["b"] = [3]
table["a"].append(4)
del ring  # never freed now, and the collector must not try
gc.collect()
fresh = [Node(None) for _ in range(1000)]
del fresh
print(sorted(table.items()), gc.collect() >= 0)
"""


def test_immortal_objects_still_change_and_the_collector_leaves_them_alone() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STILL_WORKS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('a', [1, 2, 4]), ('b', [3])] True"


# As the template does it: in pieces, stopping whenever a launch waits, then going on.
IN_PIECES = """
import json
import agentproc.main  # the agent runtime, as the template has it
from agentproc.immortal_heap import Immortalizer

immortalizer, pieces = Immortalizer(), 1
while not immortalizer.run(lambda: True):  # asked to stop at every chance
    pieces += 1
again = Immortalizer()
assert again.run(lambda: False)
print(json.dumps({"pieces": pieces, "made": immortalizer.made, "again": again.made}))
"""


def test_the_work_is_done_in_pieces_and_nothing_is_done_twice() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IN_PIECES], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    if supported():
        assert result["made"] >= 50_000  # the runtime's modules, classes, functions, code
        assert result["pieces"] >= result["made"] // Immortalizer.PIECE
        assert result["again"] < 100  # only what was made since (the second run's own)
    else:
        assert result == {"pieces": 1, "made": 0, "again": 0}
