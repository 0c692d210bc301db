"""Waiting for what another process, thread or socket does: `until` in a test's event loop,
`wait_for` in a plain (blocking) test. Both fail with the condition they waited for, so a
timed-out test says what never happened."""

from __future__ import annotations

import ast
import asyncio
import linecache
import textwrap
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def describe(condition: Callable[[], object]) -> str:
    """The condition as written: a lambda's body from its source, else the function's name."""
    name: str = getattr(condition, "__qualname__", repr(condition))
    code = getattr(condition, "__code__", None)
    if name.rsplit(".", 1)[-1] != "<lambda>" or code is None:
        return name.rsplit(".", 1)[-1]
    lines = [line for _, _, line in code.co_lines() if line is not None]
    first, last = code.co_firstlineno, max(lines, default=code.co_firstlineno)
    # The lambda's lines (and a few after, for the brackets that close it) hold whatever
    # surrounds it too: parse them, closed by a parenthesis if the lambda is an argument.
    for end in range(last, last + 5):
        source = textwrap.dedent(
            "".join(linecache.getline(code.co_filename, n) for n in range(first, end + 1))
        ).strip()
        for text in (source, f"(\n{source}\n)", f"(\n{source.rstrip(',')}\n)"):
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            lambdas = [node for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
            if len(lambdas) == 1:
                return ast.unparse(lambdas[0].body)
            return name
    return name


def _timed_out(
    condition: Callable[[], object], what: str | None, timeout: float, last: object
) -> str:
    return f"timed out after {timeout}s waiting for {what or describe(condition)} (last: {last!r})"


async def until(
    condition: Callable[[], T], timeout_s: float = 10.0, *, what: str | None = None
) -> T:
    """Poll `condition` from the event loop until it is truthy; its value. `what` names it in
    the failure (default: the condition's source)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (value := condition()):
        if loop.time() > deadline:
            raise AssertionError(_timed_out(condition, what, timeout_s, value))
        await asyncio.sleep(0.005)
    return value


def wait_for(
    condition: Callable[[], T],
    timeout: float = 10,
    interval: float = 0.02,
    *,
    what: str | None = None,
) -> T:
    """Poll `condition`, blocking, until it is truthy; its value. `what` names it in the
    failure (default: the condition's source)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(condition, what, timeout, value))
        time.sleep(interval)
    return value
