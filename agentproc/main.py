"""Start-up of an AgentProcess: arguments, parent-death signal, loading, then run."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from agentproc import tracing
from agentproc.catalog import ToolPolicy
from agentproc.counters import COUNTERS
from agentproc.extensions import EventBus, ExtensionStartError, load_extensions, plan_extensions
from agentproc.messages import ModelError
from agentproc.process import AgentProcess
from agentproc.providers import Provider, make_provider
from agentproc.providers.endpoints import effective_endpoint
from agentproc.tool_registry import ToolLoadError, ToolRegistry
from agentproc.turn import AgentDefinition
from goondan.bundle import AgentSpec, BundleInvalid, Resource, resolve_value
from goondan.bundle.cache import load_bundle_cached
from goondan.hardening import harden_agent
from goondan.logs import configure_logging, record_last_error
from goondan.orphans import die_with_parent
from goondan.paths import StatePaths
from goondan.proctitle import set_title
from goondan.settings import DEFAULTS, Settings, SettingsError
from ipc import wire
from ipc.credential import properties, read_credential_fd
from ipc.dealer import send_once
from ipc.error_codes import ErrorCode

if TYPE_CHECKING:
    import uvloop


class StartError(Exception):
    """A reason this agent cannot start that the user can fix; reported to the orchestrator."""


def _provider(agent_name: str, model_resource: Resource) -> Provider:
    """The provider of a Model resource, its keys (`apiKey`, then `apiKeys`) read from the
    environment."""
    model = model_resource.spec
    keys: list[str] = []
    sources = [("apiKey", model.api_key)] if model.api_key is not None else []
    sources += [(f"apiKeys[{n}]", source) for n, source in enumerate(model.api_keys)]
    for where, source in sources:
        key = resolve_value(source, os.environ)
        if source.env and not key:
            raise StartError(
                f"{model_resource.label}: the environment variable {source.env} is not set "
                f"(Model.spec.{where}.valueFrom.env); set it where the daemon runs "
                "(for systemd: the unit's EnvironmentFile)"
            )
        if key and key not in keys:
            keys.append(key)
    endpoint = effective_endpoint(model.provider, model.endpoint, os.environ)
    if endpoint.url is not None:
        structlog.get_logger().info(
            "model endpoint", agent=agent_name, url=endpoint.url, source=endpoint.source
        )
    try:
        return make_provider(model, keys[0] if keys else None, more_keys=keys[1:])
    except (ValueError, ModelError) as exc:
        raise StartError(f"{model_resource.label}: {exc}") from None


async def build_definition(
    args: argparse.Namespace, settings: Settings = DEFAULTS
) -> tuple[AgentDefinition, dict[str, Any]]:
    """Load the bundle and make this agent: provider, tools, extensions, policies.

    Raises StartError with a message for whoever waits on the agent."""
    try:
        bundle = load_bundle_cached(args.bundle)  # parsed once by the template process
    except BundleInvalid as exc:
        raise StartError(f"the bundle no longer validates:\n{exc}") from None
    swarm = bundle.select_swarm(args.swarm)
    agents = bundle.swarm_agents(swarm)
    agent = agents.get(args.agent)
    if agent is None:
        raise StartError(f"agent '{args.agent}' is not in Swarm/{swarm.name}")
    model_resource = bundle.agent_model(agent)
    model = model_resource.spec
    provider = _provider(agent.name, model_resource)
    compaction_model = bundle.compaction_model(agent)
    compaction_provider = None
    try:
        if compaction_model is not None:
            compaction_provider = _provider(agent.name, compaction_model)
        tools = bundle.agent_tools(agent)
        registry = ToolRegistry.from_resources(tools)
    except (StartError, ToolLoadError) as exc:
        await provider.aclose()
        if compaction_provider is not None:
            await compaction_provider.aclose()
        raise StartError(str(exc)) from None
    # MCP servers start with the agent; one that fails does not stop it (its tools report
    # why, and it is retried with back-off).
    mcp = None
    if any(getattr(r.spec, "mcp", None) is not None for r in tools):
        from agentproc.mcp_tools import McpTools  # the SDK's client: agents with MCP Tools only

        mcp = McpTools(registry, tools)
        await mcp.start()
    spec: AgentSpec = agent.spec
    COUNTERS.reset(model.model)
    policy = swarm.spec.policy
    definition = AgentDefinition(
        name=agent.name,
        provider=provider,
        registry=registry,
        system_prompt=bundle.system_prompt(agent),
        params=dict(spec.model_config.params),
        max_steps=policy.max_steps_per_turn,
        policy=ToolPolicy(spec.tool_policy),
        budget=policy.budget,
        loop_detection=policy.loop_detection,
        pricing=model.pricing,
        bus=EventBus(),
        settings=settings.agent,
        bundle_root=str(bundle.root),
        compaction_provider=compaction_provider,
        mcp=mcp,
        spans=tracing.span_sink(model=model.model, provider=model.provider),  # if asked
    )
    try:
        await load_extensions(
            plan_extensions(bundle, agent),
            agent_name=agent.name,
            pipeline=definition.pipeline,
            registry=registry,
            bus=definition.bus or EventBus(),
        )
        _check_tools(agent, definition)
    except (ExtensionStartError, StartError) as exc:
        await provider.aclose()
        if compaction_provider is not None:
            await compaction_provider.aclose()
        if mcp is not None:
            await mcp.aclose()
        raise StartError(str(exc)) from None
    # Tuples, shared with the template where they can be: each turn's context takes them as
    # they are, and a forked agent copies no page of the bundle to list its swarm.
    names = bundle.swarm_agent_names(swarm)
    catalog = {
        "swarmName": swarm.name,
        "entryAgent": bundle.entry_agent(swarm),
        "selfAgent": agent.name,
        "availableAgents": names,
        "callableAgents": tuple(n for n in names if n != agent.name),
    }
    return definition, catalog


def _check_tools(agent: Resource, definition: AgentDefinition) -> None:
    """Required tools must exist; policy patterns that match nothing are worth a warning."""
    log = structlog.get_logger().bind(agent=agent.name)
    spec: AgentSpec = agent.spec
    tools = [e.name for e in definition.registry.entries() if e.source != "runtime"]
    missing = [name for name in spec.required_tools if name not in tools]
    if missing:
        offered = ", ".join(n for n in tools if definition.policy.permits(n)) or "none"
        raise StartError(
            f"{agent.label}: spec.requiredTools names {', '.join(missing)}, which "
            f"{'is not a tool' if len(missing) == 1 else 'are not tools'} of this agent "
            f"(its tools: {offered}); add the Tool to spec.tools or fix the name"
        )
    for pattern in definition.policy.unmatched(tools):
        log.warning(
            "toolPolicy entry matches no tool of this agent",
            pattern=pattern,
            tools=tools,
            where=f"{agent.label} spec.toolPolicy",
        )
    denied = [name for name in spec.required_tools if not definition.policy.permits(name)]
    if denied:
        raise StartError(
            f"{agent.label}: spec.requiredTools names {', '.join(denied)}, which "
            "spec.toolPolicy does not allow; allow it or drop it from requiredTools"
        )
    if definition.budget.max_turn_cost_usd is not None and definition.pricing is None:
        log.warning(
            "policy.budget.maxTurnCostUsd is set but the agent's Model has no spec.pricing: "
            "the cost limit cannot apply"
        )


def _settings(text: str) -> Settings:
    try:
        return Settings.from_argv(text)
    except SettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agentproc")
    parser.add_argument("--agent", required=True)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--swarm", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--state-root", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument(
        "--nice", type=int, default=0, help="lower this process's priority by this much"
    )
    parser.add_argument(
        "--settings",
        type=_settings,
        default=DEFAULTS,
        help="the daemon's settings that differ from the defaults (JSON)",
    )
    parser.add_argument(
        "--credential-fd",
        type=int,
        help="an inherited pipe with the credential to present to the orchestrator",
    )
    parser.add_argument(
        "--tls-fd",
        type=int,
        help="an inherited pipe with the TLS certificate, key and CA for a tls:// endpoint",
    )
    return parser


# Built at import, so agents forked from the template inherit it: building one (its help
# texts go through gettext) is milliseconds of every agent's start.
_PARSER = _make_parser()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return _PARSER.parse_args(argv)


async def _serve(args: argparse.Namespace, credential: bytes | None) -> int:
    log = structlog.get_logger().bind(agent=args.agent)
    try:
        definition, catalog = await build_definition(args, args.settings)
    except (StartError, LookupError) as exc:
        log.error("agent cannot start", error=str(exc))
        error = wire.ErrorInfo(ErrorCode.E_AGENT_START, str(exc))
        frame = wire.encode(wire.START_ERROR, args.agent, wire.ORCHESTRATOR, error)
        await send_once(args.endpoint, args.agent, frame, properties=properties(credential))
        return 3
    process = AgentProcess(
        definition,
        swarm=args.swarm,
        catalog=catalog,
        paths=StatePaths.at(args.state_root),
        endpoint=args.endpoint,
        credential=credential,
        settings=args.settings,
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, process.request_stop)
    try:
        return await process.run()
    finally:
        await definition.provider.aclose()
        if definition.compaction_provider is not None:
            await definition.compaction_provider.aclose()
        if definition.mcp is not None:
            await definition.mcp.aclose()


class Prepared:
    """An agent process's start-up as far as it does not depend on which agent it is: done by
    a spare of the template (`agentproc.zygote`) before it is given its launch, from the
    argv every agent of the daemon gets (with an empty `--agent`)."""

    def __init__(self, argv: list[str]) -> None:
        import uvloop

        self.argv = argv
        self.args = parse_args(argv)
        self.stale = False  # the launch changed the environment this was set up in
        _set_up_process(self.args)
        self.loop: uvloop.Loop = uvloop.new_event_loop()

    def args_for(self, argv: list[str] | None) -> argparse.Namespace | None:
        """The arguments of `argv` if it is this argv but for `--agent`'s value, else None."""
        if self.stale or argv is None or len(argv) != len(self.argv) or "--agent" not in argv:
            return None
        at = argv.index("--agent") + 1
        if argv[:at] != self.argv[:at] or argv[at + 1 :] != self.argv[at + 1 :]:
            return None
        args = argparse.Namespace(**vars(self.args))
        args.agent = argv[at]
        return args

    def take_loop(self) -> uvloop.Loop:
        return self.loop

    def discard(self) -> None:
        self.loop.close()


def _set_up_process(args: argparse.Namespace, niced: int = 0) -> None:
    """What every agent process does before it is given work, whichever agent it is."""
    die_with_parent(args.parent_pid)
    if args.nice > niced:
        os.nice(args.nice - niced)  # before any thread starts: threads take their creator's
    if args.settings.daemon.agent_scheduling == "batch" and hasattr(os, "SCHED_BATCH"):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # as nice: before threads
    # Ctrl-C in a terminal reaches the whole process group; the orchestrator decides for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging()
    harden_agent(args.state_root)


def main(
    argv: list[str] | None = None,
    credential: bytes | None = None,
    prepared: Prepared | None = None,
) -> int:
    """`credential`: what the template was given for this launch (else `--credential-fd`).
    `prepared`: what a spare did before its launch came, used if that launch's argv is the
    one it prepared for (else discarded, and this start does it all)."""
    args = prepared.args_for(argv) if prepared is not None else None
    set_up = args is not None
    if args is None:
        args = parse_args(argv)
    set_title(f"goondan: agent {args.agent} ({args.swarm})")
    if credential is None and args.credential_fd is not None:
        credential = read_credential_fd(args.credential_fd)
    if args.tls_fd is not None:  # an agent on another machine (agentproc.ray_actor)
        from ipc import tls

        pem = msgspec.json.decode(read_credential_fd(args.tls_fd), type=tls.ClientCredentials)
        tls.set_client_context(tls.client_context(pem))
    import uvloop

    loop_factory = uvloop.new_event_loop
    if prepared is not None and set_up:
        loop_factory = prepared.take_loop
    else:
        if prepared is not None:
            prepared.discard()
        _set_up_process(args, niced=prepared.args.nice if prepared is not None else 0)
    record_last_error(StatePaths.at(args.state_root).last_error_dir / args.agent)
    structlog.contextvars.bind_contextvars(agent=args.agent)
    structlog.get_logger().debug("agent process set up", spare=set_up)
    try:
        return uvloop.run(_serve(args, credential), loop_factory=loop_factory)
    except KeyboardInterrupt:
        return 130
    except Exception:  # logged at error level, so `status` can say what ended the agent
        structlog.get_logger().exception("agent process failed")
        return 1
    finally:
        sys.stdout.flush()
