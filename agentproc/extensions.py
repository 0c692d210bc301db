"""Extensions of an agent: loading, the `api` they get, and the in-process event bus.

At start, each Extension the agent lists is imported and its `register(api, config)` called
(awaited when async), one after another in the declared order, with `spec.config` overlaid by
the agent's per-ref `config`. A failure stops the start with a message naming the extension:

- `E_EXT_LOAD`: the entry cannot be imported, or has no `register`;
- `E_EXT_CONFIG`: `register` raised `ExtensionConfigError` (a bad `config`);
- `E_EXT_INIT`: `register` raised anything else (including a bad middleware or tool).

`Agent.spec.requiredTools` brings in `@goondan/base`'s `required-tools-guard` (with
`mode: all`) when the agent does not list it, and adds to its `requiredTools` when it does.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
import structlog

from agentproc.extension_state import current_state
from agentproc.middleware import Pipeline
from agentproc.tool_registry import (
    DEFAULT_ERROR_MESSAGE_LIMIT,
    ToolRegistry,
    import_entry_module,
    make_entry,
)
from goondan.bundle import Bundle, RefItem, Resource
from goondan.bundle.bundle import REQUIRED_TOOLS_GUARD
from goondan.bundle.model import AgentSpec, ExtensionSpec
from goondan.extensions import ExtensionConfigError
from goondan.tools import ToolCatalogItem, ToolHandler
from ipc.error_codes import ErrorCode
from ipc.tasks import TaskSet

_GUARD = (REQUIRED_TOOLS_GUARD.name, REQUIRED_TOOLS_GUARD.package)


class ExtensionStartError(Exception):
    """An extension stopped the agent's start; `code` is E_EXT_LOAD, E_EXT_INIT or
    E_EXT_CONFIG and the message names the extension."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class EventBus:
    """`api.events`: in-process pub/sub shared by the agent's extensions (and the runtime's
    own events). A handler's exception is logged and never reaches the emitter; an async
    handler runs as a task of the bus, cancelled by `aclose`."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[Callable[..., Any]]] = {}
        self._tasks = TaskSet("extension events")
        self._log = structlog.get_logger().bind(component="extension-events")

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[[], None]:
        if not callable(handler):
            raise ValueError(f"the handler for '{event}' is not callable")
        self._handlers.setdefault(event, []).append(handler)

        def unsubscribe() -> None:
            handlers = self._handlers.get(event, [])
            if handler in handlers:
                handlers.remove(handler)

        return unsubscribe

    def emit(self, event: str, *args: Any) -> None:
        for handler in list(self._handlers.get(event, ())):
            try:
                result = handler(*args)
                if inspect.isawaitable(result):
                    coro = result if inspect.iscoroutine(result) else _awaited(result)
                    self._tasks.spawn(coro, name=f"extension event {event}")
            except Exception:
                self._log.exception("extension event handler failed", eventName=event)

    def wants(self, event: str) -> bool:
        return event in self._handlers

    def subscribed(self) -> bool:
        """Whether any handler listens, to any event."""
        return any(self._handlers.values())

    def publish(self, event: str, payload: dict[str, Any]) -> None:
        """A runtime event (`turn.completed`, `tool.called`, ...), for subscribers only."""
        if event in self._handlers:
            self.emit(event, payload)

    async def aclose(self) -> None:
        """Cancel the async handlers still running and wait until they have ended."""
        await self._tasks.close()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class _PipelineApi:
    def __init__(self, pipeline: Pipeline, owner: str) -> None:
        self._pipeline = pipeline
        self._owner = owner

    def register(self, kind: str, fn: Any, *, priority: int = 0) -> None:
        self._pipeline.register(kind, fn, priority=priority, owner=self._owner)


class _ToolsApi:
    def __init__(self, registry: ToolRegistry, owner: str, log: Any) -> None:
        self._registry = registry
        self._owner = owner
        self._log = log

    def register(
        self,
        item: ToolCatalogItem | Mapping[str, Any],
        handler: ToolHandler,
        *,
        timeout_ms: int | None = None,
        sequential: bool = False,
        error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
    ) -> None:
        if isinstance(item, Mapping):
            item = msgspec.convert(dict(item), ToolCatalogItem)
        entry = make_entry(
            item.name,
            item.description,
            item.parameters,
            handler,
            error_message_limit=error_message_limit,
            timeout_ms=timeout_ms,
            sequential=sequential,
            source="extension",
        )
        if not self._registry.register(entry):
            self._log.warning(
                "tool not registered: a config tool has the same name", tool=item.name
            )


class _StateApi:
    def __init__(self, owner: str) -> None:
        self._owner = owner

    def _store(self) -> Any:
        store = current_state.get()
        if store is None:
            raise RuntimeError(
                f"extension '{self._owner}': api.state belongs to an instance; use it inside "
                "middleware, tool handlers or event handlers, not in register()"
            )
        return store

    def get(self) -> dict[str, Any] | None:
        value: dict[str, Any] | None = self._store().get(self._owner)
        return value

    def set(self, value: dict[str, Any] | None) -> None:
        self._store().set(self._owner, value)


class ExtensionApiImpl:
    """What `register(api, config)` receives (the `goondan.ExtensionApi` protocol)."""

    def __init__(
        self,
        name: str,
        agent_name: str,
        pipeline: Pipeline,
        registry: ToolRegistry,
        bus: EventBus,
    ) -> None:
        self._name = name
        self._agent_name = agent_name
        self._logger = structlog.get_logger().bind(extension=name)
        self._pipeline = _PipelineApi(pipeline, name)
        self._tools = _ToolsApi(registry, name, self._logger)
        self._state = _StateApi(name)
        self._events = bus

    @property
    def name(self) -> str:
        return self._name

    @property
    def agent_name(self) -> str:
        return self._agent_name

    @property
    def pipeline(self) -> _PipelineApi:
        return self._pipeline

    @property
    def tools(self) -> _ToolsApi:
        return self._tools

    @property
    def state(self) -> _StateApi:
        return self._state

    @property
    def events(self) -> EventBus:
        return self._events

    @property
    def logger(self) -> Any:
        return self._logger


class Planned(msgspec.Struct, frozen=True):
    resource: Resource
    config: dict[str, Any]  # spec.config overlaid by the agent's per-ref config
    own_config: dict[str, Any] = {}  # the agent's per-ref config alone


def plan_extensions(bundle: Bundle, agent: Resource) -> list[Planned]:
    """The agent's extensions (`Bundle.agent_extensions`: in declared order, plus the
    required-tools guard that `spec.requiredTools` implies) with their merged config."""
    spec: AgentSpec = agent.spec
    required = list(spec.required_tools)
    planned: list[Planned] = []
    for index, resource in enumerate(bundle.agent_extensions(agent)):
        if index == len(spec.extensions):  # the implied guard, appended last
            planned.append(Planned(resource, {"requiredTools": required, "mode": "all"}))
            break
        ext_spec: ExtensionSpec = resource.spec
        own = dict(spec.extensions[index].config or {})
        config = {**ext_spec.config, **own}
        if required and (resource.name, resource.package) == _GUARD:
            merged = [*_str_list(config.get("requiredTools")), *required]
            mode = own.get("mode", "all")  # spec.requiredTools: each of them
            config = {**config, "mode": mode, "requiredTools": list(dict.fromkeys(merged))}
        planned.append(Planned(resource, config, own))
    return planned


async def load_extensions(
    plans: list[Planned],
    *,
    agent_name: str,
    pipeline: Pipeline,
    registry: ToolRegistry,
    bus: EventBus,
) -> list[str]:
    """Import and register each planned extension, in order. Raises ExtensionStartError."""
    names: list[str] = []
    for plan in plans:
        resource = plan.resource
        try:
            module = import_entry_module(resource, "goondan_ext")
        except ImportError as exc:
            raise ExtensionStartError(ErrorCode.E_EXT_LOAD, str(exc)) from None
        register = getattr(module, "register", None)
        if not callable(register):
            raise ExtensionStartError(
                ErrorCode.E_EXT_LOAD,
                f"{resource.label}: {resource.entry_path()} must define "
                "`def register(api, config): ...`",
            )
        api = ExtensionApiImpl(resource.name, agent_name, pipeline, registry, bus)
        try:
            result = register(api, dict(plan.config))
            if inspect.isawaitable(result):
                await result
        except ExtensionConfigError as exc:
            raise ExtensionStartError(
                ErrorCode.E_EXT_CONFIG, f"{resource.label}: invalid config: {exc}"
            ) from None
        except Exception as exc:  # user code: report it, don't crash with a traceback
            raise ExtensionStartError(
                ErrorCode.E_EXT_INIT,
                f"{resource.label}: register() failed: {type(exc).__name__}: {exc}",
            ) from None
        names.append(resource.name)
    return names


def _str_list(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


__all__ = [
    "EventBus",
    "ExtensionApiImpl",
    "ExtensionStartError",
    "Planned",
    "RefItem",
    "load_extensions",
    "plan_extensions",
]
