"""Fill the template's half-used pymalloc pools, so its children allocate packed objects.

pymalloc hands out small objects (up to 512 bytes, in 32 size classes) from 16 KiB pools, and
serves a size class from its partly used pools first. After the imports and the rehearsal the
template's partly used pools have their free blocks scattered over pages of long-lived objects:
a child's turn that allocates a few dozen objects and frees them again would touch all those
pages (at 200 agents on 2 cores every page a turn touches is a cache and TLB miss, and the
first write to one a copy-on-write fault). Filled once here, with small immutable objects
nobody reads, those holes are gone: a child's allocations come one after the other from pool
space never used, on few pages of its own: less memory touched per turn, fewer page faults per
delegate (`bench --only touch`, figure 8; docs/performance.md has the numbers).

It costs the template the blocks it fills (shared by every child). It does nothing
when pymalloc is not the allocator (`PYTHONMALLOC`, `-X dev`), and fills at most CLASS_BYTES
of a size class whatever happens (a CPython whose pools are laid out otherwise).
"""

from __future__ import annotations

import itertools
import os
import sys

SIZE_CLASSES = 32  # block sizes 16, 32, ... 512
CLASS_BYTES = 256 * 1024  # the most filled in one size class
BATCH = 8  # objects allocated together (a pool holds at least 31)


def block_size(size_class: int) -> int:
    return 16 * (size_class + 1)


def sized_object(size_class: int) -> object:
    """A new object pymalloc serves from `size_class`."""
    if size_class == 0:
        return object()  # 16 bytes
    if size_class == 1:
        return size_class + 1_000_000  # 28 bytes: an int past the cached small ones
    return bytes(block_size(size_class) - 33)  # a bytes object's header is 33 bytes


def allocate(size_class: int, count: int = BATCH) -> list[object]:
    """`count` new objects of `size_class`, with nothing else allocated between them."""
    objects: list[object] = [None] * count
    i = 0
    while i < count:
        objects[i] = sized_object(size_class)
        i += 1
    return objects


def pymalloc_in_use() -> bool:
    return os.environ.get("PYTHONMALLOC", "pymalloc") == "pymalloc" and not sys.flags.dev_mode


def fill_partial_pools() -> list[object]:
    """Allocate from every size class until a batch comes packed from pool space never used;
    return what must stay alive (the filler) for the holes to stay filled."""
    kept: list[object] = []
    if not pymalloc_in_use():
        return kept
    for size_class in range(SIZE_CLASSES):
        size = block_size(size_class)
        for _ in itertools.repeat(None, CLASS_BYTES // size // BATCH):
            batch = allocate(size_class)
            if is_packed(batch, size):
                break  # dropped: its pool space is free again, for a child to take
            kept.extend(batch)
    return kept


def is_packed(objects: list[object], size: int) -> bool:
    """After the first, each object right after the one before: handed out from a pool's
    untouched end. (The first may fill the one hole our own checking left: each check makes
    ints, of size class 1.) No iterator: one would come from size class 2."""
    i, expected = 2, id(objects[1]) + size
    while i < len(objects):
        if id(objects[i]) != expected:
            return False
        expected += size
        i += 1
    return True
