"""The middleware registry: `turn`, `step` and `toolCall` onions, composed once.

Order: lower `priority` is outer; equal priorities keep registration order, and extensions
register in the order the agent lists them, so the first one is outermost. `chain(kind, core)`
returns the layers as a tuple ending with the core; it is built once and rebuilt only when a
middleware is added, so running a call costs one context object and one await per layer.
The `next()` that walks the tuple (at most once per layer) is on the contexts
(`goondan.extensions`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, get_args

import msgspec

from goondan.extensions import Layer, MiddlewareKind

KINDS: tuple[str, ...] = get_args(MiddlewareKind)


class Registered(msgspec.Struct, frozen=True):
    kind: str
    fn: Callable[[Any], Awaitable[Any]]
    priority: int
    seq: int
    owner: str  # the extension that registered it ("" for the runtime)


class Pipeline:
    def __init__(self) -> None:
        self._items: dict[str, list[Registered]] = {kind: [] for kind in KINDS}
        self._seq = 0
        self._chains: dict[tuple[str, int], tuple[Layer, ...]] = {}

    def register(self, kind: str, fn: Any, *, priority: int = 0, owner: str = "") -> None:
        """Raises ValueError for an unknown kind or a middleware that is not async."""
        if kind not in self._items:
            raise ValueError(
                f"unknown middleware type {kind!r}; use one of {', '.join(map(repr, KINDS))}"
            )
        if not _is_async(fn):
            raise ValueError(
                f"{kind} middleware {getattr(fn, '__qualname__', fn)!r} must be an async "
                "function: async def mw(ctx): ... return await ctx.next()"
            )
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"middleware priority must be an integer, got {priority!r}")
        self._seq += 1
        self._items[kind].append(Registered(kind, fn, priority, self._seq, owner))
        self._items[kind].sort(key=lambda item: (item.priority, item.seq))
        self._chains.clear()

    def middlewares(self, kind: str) -> list[Registered]:
        return list(self._items[kind])

    def has(self, kind: str) -> bool:
        return bool(self._items[kind])

    def chain(self, kind: str, core: Layer) -> tuple[Layer, ...]:
        """The layers of `kind` (outermost first) followed by `core`; cached per core."""
        key = (kind, id(core))
        layers = self._chains.get(key)
        if layers is None:
            layers = self._chains[key] = (*(item.fn for item in self._items[kind]), core)
        return layers


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - async callable objects count too
    return call is not None and inspect.iscoroutinefunction(call)
