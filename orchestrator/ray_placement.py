"""Agents placed on a Ray cluster (`goondan run --placement ray`).

Ray places; the orchestrator still routes and supervises. Each launch of a Ray-placed agent is
one actor (`agentproc.ray_actor.AgentActor`) with the agent's `spec.resources`, created with
`max_restarts=0` so that its death, of its process or of its node, comes back to the supervisor
as the exit of a `ChildProcess` (`RayChild.wait`), with the same statuses, back-off and
redelivery as a local crash. The actors belong to this process's Ray driver: when the
orchestrator dies, even by SIGKILL, Ray ends them.

The agent connects back over TCP with mutual TLS (`ipc.tls`) to the listener `RayLauncher.start`
opens on agents.sock's router. The bundle reaches the nodes as a zip archive in Ray's object
store (`orchestrator.ray_bundle`), packed again after each reload, so the agents a reload
restarts read the new one.
The state root must be the same path on every node (a shared file system): that is where an
agent's conversations, extension state and tool records live, so a re-placed agent finds them.

Ray is imported here only, and this module only in that mode.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from goondan.bundle import Bundle
from goondan.bundle.model import AgentResources, Resource
from goondan.bundle.placement import ray_agents
from ipc import tls
from ipc.router_socket import RouterSocket
from orchestrator.launcher import AgentLauncher, ChildProcess, LaunchSpec
from orchestrator.ray_bundle import pack_bundle

ADDRESS_ENV = "GOONDAN_RAY_ADDRESS"
DEFAULT_LISTEN = "127.0.0.1:0"


class RayPlacement(msgspec.Struct, frozen=True):
    """`--placement ray`: the cluster (None: `GOONDAN_RAY_ADDRESS`, else Ray's own default) and
    the TLS listener's HOST:PORT (port 0: any free one)."""

    address: str | None = None
    listen: str = DEFAULT_LISTEN


def actor_options(resources: AgentResources) -> dict[str, Any]:
    """Ray's options for an agent's actor: its resources, and no restart by Ray."""
    options: dict[str, Any] = {
        "max_restarts": 0,
        "max_task_retries": 0,
        "max_concurrency": 4,  # `wait` blocks while `signal` and `info` are called
        # An agent mostly waits on its model: it reserves no CPU unless it says so.
        "num_cpus": resources.cpus if resources.cpus is not None else 0,
    }
    if resources.gpus:
        options["num_gpus"] = resources.gpus
    if resources.memory_mb:
        options["memory"] = int(resources.memory_mb * 1024 * 1024)
    if resources.custom:
        options["resources"] = dict(resources.custom)
    return options


class RayChild:
    """One agent's actor, as the supervisor sees a child process."""

    def __init__(self, actor: Any, pid: int, node: str) -> None:
        self.actor = actor
        self.pid = pid
        self.node = node  # shown by `goondan status`

    async def wait(self) -> int:
        import ray

        try:
            code: int = await self.actor.wait.remote()
        except ray.exceptions.RayError as exc:  # its process or its node is gone
            structlog.get_logger().warning(
                "agent actor lost", node=self.node, error=type(exc).__name__
            )
            code = -signal.SIGKILL
        ray.kill(self.actor, no_restart=True)  # free its resources now
        return code

    def terminate(self) -> None:
        self.actor.signal.remote(int(signal.SIGTERM))

    def kill(self) -> None:
        import ray

        ray.kill(self.actor, no_restart=True)  # its agent process dies with it


class RayLauncher:
    """Launches Ray-placed agents; the daemon's local launcher keeps the others
    (`PlacedLauncher`)."""

    def __init__(
        self,
        spec: LaunchSpec,
        placement: RayPlacement,
        resources: dict[str, AgentResources],
        router: RouterSocket,
        tls_dir: Path,
        *,
        version: str | None = None,
        environment: Callable[[], dict[str, str]] = dict,
    ) -> None:
        """`version`: the goondan version nodes must have (default: this one's).
        `environment()`: the variables each launch sets in the agent's environment on its
        node, over the node's own (the daemon gives its env files' and those the bundle
        reads)."""
        self.spec = spec
        self._environment = environment
        self.placement = placement
        self.resources = resources
        self._router = router
        self._tls_dir = tls_dir
        self._version = version
        self._endpoint: str | None = None
        self._authority: tls.Authority | None = None
        self._starting: asyncio.Future[None] | None = None
        self._actor_class: Any = None
        # The bundle as the nodes get it: its archive's sha256 and the archive in Ray's object
        # store (None: packed at the next launch, after a start or a reload).
        self._packed: tuple[str, Any] | None = None
        self._log = structlog.get_logger().bind(component="ray")

    async def start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        try:
            await asyncio.shield(self._starting)
        except ClusterUnreachable:
            self._starting = None  # the next launch (after the supervisor's back-off) tries again
            raise

    async def _start(self) -> None:
        address = self.placement.address or os.environ.get(ADDRESS_ENV) or None
        if address is not None:
            await asyncio.to_thread(check_reachable, address)
        import ray

        import goondan
        from agentproc.ray_actor import AgentActor

        if self._version is None:
            self._version = goondan.__version__
        host, _, port = self.placement.listen.rpartition(":")
        self._authority = tls.Authority(self._tls_dir, host)
        bound = await self._router.listen_tls(host, int(port), self._authority.server_context())
        # ray.init blocks (it connects): in a thread, the loop serves on.
        await asyncio.to_thread(
            ray.init,
            address=address,
            include_dashboard=False,
            configure_logging=False,
            ignore_reinit_error=True,  # a process that is a Ray driver already (a test)
        )
        self._actor_class = ray.remote(AgentActor)
        advertised = bound[0]
        if advertised in ("0.0.0.0", "::"):  # any address: tell the agents the driver node's
            advertised = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self._endpoint = f"tls://{advertised}:{bound[1]}"
        self._log.info(
            "connected to the Ray cluster",
            address=address or "default",
            listen=f"{bound[0]}:{bound[1]}",
            agents=sorted(self.resources),
        )

    @property
    def endpoint(self) -> str | None:
        """The TLS listener agents connect to (once started)."""
        return self._endpoint

    def set_providers(self, providers: tuple[str, ...]) -> None:
        return None  # each agent imports its own provider

    async def launch(self, agent: str, credential: bytes) -> ChildProcess:
        await self.start()
        assert self._authority is not None and self._endpoint is not None
        spec = msgspec.structs.replace(self.spec, endpoint=self._endpoint)
        certificate = self._authority.issue_client(agent)  # this launch's, like the credential
        options = actor_options(self.resources.get(agent, AgentResources()))
        digest, packed = await self._bundle()
        actor = self._actor_class.options(name=None, **options).remote(
            self._version,
            spec.argv(agent, 0),
            credential,
            msgspec.json.encode(certificate),
            self._environment(),
            digest,
            packed,
        )
        import ray

        try:
            info: dict[str, Any] = await actor.info.remote()
        except ray.exceptions.RayError as exc:
            ray.kill(actor, no_restart=True)
            raise OSError(_start_failure(exc)) from None
        except BaseException:  # cancelled while waiting for a node: no actor left behind
            ray.kill(actor, no_restart=True)
            raise
        node = f"{info['host']} ({info['nodeIp']}, {info['nodeId'][:8]})"
        self._log.info("agent placed", agent=agent, node=node, pid=info["pid"])
        return RayChild(actor, int(info["pid"]), node)

    def bundle_changed(self) -> None:
        """A reload: the launches from now on ship the bundle as it is then."""
        self._packed = None

    async def _bundle(self) -> tuple[str, Any]:
        """The bundle's archive for an actor: its sha256, and a reference to it in Ray's
        object store, which each node fetches once (the actor unpacks it once per node)."""
        if self._packed is None:
            import ray

            data = await asyncio.to_thread(pack_bundle, self.spec.bundle, self.spec.state_root)
            self._packed = hashlib.sha256(data).hexdigest(), ray.put(data)
        return self._packed

    async def aclose(self) -> None:
        if self._endpoint is not None:  # connected (`_start` got to its end)
            import ray

            ray.shutdown()


class ClusterUnreachable(OSError):
    """Nothing accepts a connection at the Ray cluster's address."""


CONNECT_TIMEOUT_S = 5.0
RAY_CLIENT_PORT = 10001  # Ray Client's default, for a `ray://HOST` address


def check_reachable(address: str) -> None:
    """A HOST:PORT or `ray://HOST[:PORT]` cluster address must accept a TCP connection:
    against a wrong one Ray's own connect retries for minutes, and every launch would wait on
    it. Other forms (`auto`) are left to Ray. Raises `ClusterUnreachable`."""
    where = _host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ClusterUnreachable(
            f"the Ray cluster at {address} cannot be reached ({exc.strerror or exc}): is it "
            "running, and is this its head node's address (`ray start --head` prints it)?"
        ) from None


def _host_port(address: str) -> tuple[str, int] | None:
    """Where a cluster address would be reached over TCP; None for a form that is not one."""
    scheme, sep, rest = address.rpartition("://")
    if sep and scheme != "ray":
        return None
    rest = rest.split("/", 1)[0]
    host, colon, port = rest.rpartition(":")
    if not colon or "]" in port:  # no port: Ray Client's for ray://, else not an address
        if not sep:
            return None
        host, port = rest, str(RAY_CLIENT_PORT)
    if not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _start_failure(exc: BaseException) -> str:
    """The reason an actor could not start, without Ray's traceback around it."""
    cause = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    text = str(getattr(exc, "error_msg", "") or cause).strip()
    for line in text.splitlines():
        if "installed on node" in line:  # agentproc.ray_actor.VersionMismatch
            return line.split("VersionMismatch: ", 1)[-1].strip()
    last = text.splitlines()[-1] if text else type(exc).__name__
    return f"the agent's Ray actor could not start: {last}"


class PlacedLauncher:
    """The daemon's agent launcher when some agents are Ray-placed: each launch goes to the
    launcher of its agent's placement."""

    def __init__(self, local: AgentLauncher, ray: RayLauncher) -> None:
        self.local = local
        self.ray = ray

    async def start(self) -> None:
        try:
            await asyncio.gather(self.local.start(), self.ray.start())
        except ClusterUnreachable as exc:  # each Ray launch says so too, and tries again
            structlog.get_logger().error("cannot reach the Ray cluster", error=str(exc))

    def set_providers(self, providers: tuple[str, ...]) -> None:
        self.local.set_providers(providers)

    def set_placement(self, resources: dict[str, AgentResources]) -> None:
        """A reload: the Ray-placed agents and their resources as the bundle has them now
        (`ray_agents`), and the bundle itself, for their next launches; an agent whose spec
        changed is restarted by the reload."""
        self.ray.resources = resources
        self.ray.bundle_changed()

    async def launch(self, agent: str, credential: bytes) -> ChildProcess:
        if agent in self.ray.resources:
            return await self.ray.launch(agent, credential)
        return await self.local.launch(agent, credential)

    async def aclose(self) -> None:
        await self.local.aclose()
        await self.ray.aclose()


def place(
    local: AgentLauncher,
    placement: RayPlacement,
    spec: LaunchSpec,
    bundle: Bundle,
    swarm: Resource,
    router: RouterSocket,
    tls_dir: Path,
    environment: Callable[[], dict[str, str]],
) -> PlacedLauncher:
    """The daemon's launcher for a `--placement ray` run (`environment`: as `RayLauncher`)."""
    resources = ray_agents(bundle, swarm, "ray")
    ray = RayLauncher(spec, placement, resources, router, tls_dir, environment=environment)
    return PlacedLauncher(local, ray)
