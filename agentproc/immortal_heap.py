"""Make the template's objects immortal before it forks, so its children keep sharing them.

A forked agent shares the template's pages until it writes to them, and CPython writes to
every object it uses: each reference taken or dropped changes the object's count. A turn uses
code objects, functions, classes, module dicts and constants made in the template, so within
its first turns every agent has copied each page holding one of them (~4 MiB of an idle
agent's PSS), and with many agents each turn meets its own cold copies in the caches instead
of pages every agent shares.

CPython 3.12 made some objects immortal (PEP 683): a count whose low 32 bits read negative is
never written again, by `Py_INCREF` or `Py_DECREF`. Giving the template's objects that count
just before it forks keeps them shared: an agent copies only what it changes (a dict it adds
to) and what it makes itself. The objects are then never freed, which costs nothing in the
template (it keeps them all anyway) and little in an agent (the pages are shared; an agent
that drops a template object leaves its memory to the template).

This writes the count through `ctypes`: the layout is CPython's, so only the 64-bit GIL
builds of 3.12 and 3.13, whose layout this was checked on, are changed; elsewhere it does
nothing. `daemon.immortal_template: false` turns it off.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import sysconfig
import types
from collections.abc import Callable

IMMORTAL = 0xFFFFFFFF  # `_Py_IMMORTAL_REFCNT` of 64-bit CPython 3.12 and 3.13
_IMMORTAL_BIT = 0x80000000  # `_Py_IsImmortal`: the low 32 bits, read as signed, are negative


def supported() -> bool:
    return (
        sys.implementation.name == "cpython"
        and (3, 12) <= sys.version_info[:2] <= (3, 13)
        and sys.maxsize > 2**32
        and not sysconfig.get_config_var("Py_GIL_DISABLED")
    )


class Immortalizer:
    """Makes the objects the collector lists, and those they hold, immortal, in pieces: the
    template does it while no launch waits, and a launch is not kept waiting for the whole
    (~75 ms for the agent runtime's ~100,000 objects; 145 ms one object at a time).

    The collector lists the objects that can hold others (frozen ones only once unfrozen);
    what they hold is found through `gc.get_referents`, and what a code object holds (its
    constants and names) through its attributes, since code objects are not listed. A fork
    between two pieces is as any other: the template freezes first, and the child shares what
    is immortal so far."""

    PIECE = 4096  # objects between two looks at whether to stop

    def __init__(self) -> None:
        self.todo: list[object] | None = None
        self.made = 0  # objects made immortal

    def run(self, interrupted: Callable[[], bool]) -> bool:
        """Go on until all are done (True; at once where it is not `supported`) or
        `interrupted()` says stop (False: call again to go on). Leaves them unfrozen: the
        caller fills its pools and freezes, as before any fork."""
        if not supported():
            return True
        if self.todo is None:
            gc.unfreeze()
            gc.collect()  # nothing unreachable may become immortal: it could never be freed
            self.todo = gc.get_objects()
        todo = self.todo
        count_of = sys.getrefcount  # reads the count without a ctypes object per object
        count_at = ctypes.c_ssize_t.from_address
        code_type = types.CodeType
        while todo:
            piece = todo[-self.PIECE :]
            del todo[-self.PIECE :]
            holders: list[object] = []  # what they hold is listed in one call for the piece
            for obj in piece:
                # Already immortal: made so by CPython, or by us, which also marks it as seen
                # (no set of the objects seen, which would take memory every child carries).
                if count_of(obj) & _IMMORTAL_BIT:
                    continue
                count_at(id(obj)).value = IMMORTAL
                self.made += 1
                if type(obj) is code_type:
                    todo.extend(_held_by_code(obj))
                else:
                    holders.append(obj)
            if holders:
                todo.extend(gc.get_referents(*holders))
            del piece, holders
            if todo and interrupted():
                return False
        return True


def _held_by_code(code: types.CodeType) -> tuple[object, ...]:
    return (
        code.co_consts,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        code.co_filename,
        code.co_name,
        code.co_qualname,
        code.co_linetable,
        code.co_exceptiontable,
    )
