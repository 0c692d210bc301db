"""`goondan run --metrics HOST:PORT`: the daemon's Prometheus metrics at `/metrics`.

Nothing here runs unless metrics are on (the daemon imports this module only then). What the
daemon knows already (processes, restarts, requests in flight) is read at scrape time by a
custom collector; the router tells `RequestStats` of each settled request (a few additions);
agents send their cumulative counts (model calls, tokens, tool calls) on their heartbeat, and
`AgentUsage` keeps per-agent totals across respawns, so no counter ever goes backwards. The
page is served by aiohttp on the daemon's own loop: a scrape reads the state between two
routing callbacks, never while one changes it.
"""

from __future__ import annotations

import bisect
import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, get_args

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from ipc import wire
from ipc.endpoints import EndpointError
from orchestrator.supervisor import Status

if TYPE_CHECKING:
    from orchestrator.router import InFlight, Router
    from orchestrator.supervisor import Supervisor

# A request is a turn, or a turn waiting on delegations: seconds to minutes.
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
PROCESS_STATUSES: tuple[str, ...] = get_args(Status)  # every one, 0 when none is in it


class RequestStats:
    """Per agent: settled requests by outcome, and their durations as a histogram."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[str, str], int] = {}
        self.buckets: dict[str, list[int]] = {}  # per bucket, not cumulative (+Inf last)
        self.sums: dict[str, float] = {}

    def finished(self, request: InFlight, outcome: str) -> None:
        agent = request.target
        key = (agent, outcome)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1
        if request.started:
            seconds = time.monotonic() - request.started
            counts = self.buckets.get(agent)
            if counts is None:
                counts = self.buckets[agent] = [0] * (len(BUCKETS) + 1)
            counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self.sums[agent] = self.sums.get(agent, 0.0) + seconds


class _Usage:
    __slots__ = ("pid", "current", "base")

    def __init__(self) -> None:
        self.pid = 0  # the incarnation `current` came from
        self.current: dict[tuple[str, str, str], int] = {}
        self.base: dict[tuple[str, str, str], int] = {}  # earlier incarnations' last counts


class AgentUsage:
    """What agents counted, kept across their respawns: each heartbeat carries the counts of
    the process since it started, so a new pid folds the old one's last counts into `base`."""

    def __init__(self) -> None:
        self.agents: dict[str, _Usage] = {}

    def report(self, agent: str, beat: wire.Heartbeat, live_pid: int | None) -> None:
        if live_pid is not None and beat.pid != live_pid:
            return  # late, from a process that has exited since: its counts may be stale
        usage = self.agents.get(agent)
        if usage is None:
            usage = self.agents[agent] = _Usage()
        if beat.pid != usage.pid:
            for key, n in usage.current.items():
                usage.base[key] = usage.base.get(key, 0) + n
            usage.pid, usage.current = beat.pid, {}
        model = beat.model
        current = {("llm", model, outcome): n for outcome, n in beat.llm.items()}
        current.update({("tokens", model, way): n for way, n in beat.tokens.items()})
        current.update({("tools", tool, outcome): n for tool, outcome, n in beat.tools})
        # Within one process the counts only grow; a replayed or reordered beat never lowers.
        for key, n in usage.current.items():
            if current.get(key, 0) < n:
                current[key] = n
        usage.current = current

    def totals(self) -> Iterator[tuple[str, tuple[str, str, str], int]]:
        for agent, usage in self.agents.items():
            keys = usage.base.keys() | usage.current.keys()
            for key in sorted(keys):
                yield agent, key, usage.base.get(key, 0) + usage.current.get(key, 0)


class DaemonCollector(Collector):
    """Reads the daemon's own state at scrape time."""

    def __init__(
        self, supervisor: Supervisor, router: Router, requests: RequestStats, usage: AgentUsage
    ) -> None:
        self.supervisor = supervisor
        self.router = router
        self.requests = requests
        self.usage = usage

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "goondan_requests", "Requests answered, by target agent", labels=["agent", "outcome"]
        )
        for (agent, outcome), n in sorted(self.requests.outcomes.items()):
            requests.add_metric([agent, outcome], n)
        yield requests
        duration = HistogramMetricFamily(
            "goondan_request_duration_seconds",
            "Time from routing a request to its answer",
            labels=["agent"],
        )
        for agent, counts in sorted(self.requests.buckets.items()):
            cumulative, running = [], 0
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                running += n
                cumulative.append((bound, running))
            duration.add_metric([agent], cumulative, self.requests.sums[agent])
        yield duration
        slots = list(self.supervisor.slots.values())
        restarts = CounterMetricFamily(
            "goondan_agent_restarts", "Respawns after a crash", labels=["agent"]
        )
        for slot in slots:
            if slot.kind == "agent":
                restarts.add_metric([slot.name], slot.restarts)
        yield restarts
        processes = GaugeMetricFamily(
            "goondan_processes",
            "Agent and connector processes by status",
            labels=["kind", "status"],
        )
        by_status: dict[tuple[str, str], int] = {}
        for slot in slots:
            by_status[(slot.kind, slot.status)] = by_status.get((slot.kind, slot.status), 0) + 1
        for kind in sorted({slot.kind for slot in slots}):
            for status in PROCESS_STATUSES:
                processes.add_metric([kind, status], by_status.get((kind, status), 0))
        yield processes
        inflight = GaugeMetricFamily(
            "goondan_inflight_requests", "Requests routed and not yet answered", labels=["agent"]
        )
        for agent in sorted(self.router.agents):
            inflight.add_metric([agent], self.router.in_flight(agent))
        yield inflight
        llm = CounterMetricFamily(
            "goondan_llm_requests", "Model calls", labels=["agent", "model", "outcome"]
        )
        tokens = CounterMetricFamily(
            "goondan_llm_tokens", "Model tokens", labels=["agent", "model", "direction"]
        )
        tools = CounterMetricFamily(
            "goondan_tool_calls", "Tool calls", labels=["agent", "tool", "outcome"]
        )
        families = {"llm": llm, "tokens": tokens, "tools": tools}
        for agent, (family, a, b), n in self.usage.totals():
            families[family].add_metric([agent, a, b], n)
        yield from families.values()


class MetricsServer:
    """`/metrics` over HTTP, on the daemon's loop. The port is bound when it is made, so that a
    port in use stops the daemon's start before it says it is ready."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            self._sock: socket.socket | None = socket.create_server(address, family=family)
        except OSError as exc:  # the port taken, an address not ours: say so, start nothing
            raise EndpointError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self._runner: web.AppRunner | None = None
        self._log = structlog.get_logger().bind(component="metrics")

    async def start(self, collector: DaemonCollector) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        ProcessCollector(registry=registry)  # the daemon's own CPU, memory, open files

        async def metrics(request: web.Request) -> web.Response:
            body = generate_latest(registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        assert self._sock is not None
        await web.SockSite(runner, self._sock).start()
        self._runner = runner
        self._log.info("metrics served", url=f"http://{self.host}:{self.port}/metrics")

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


__all__ = [
    "AgentUsage",
    "DaemonCollector",
    "MetricsServer",
    "RequestStats",
]
