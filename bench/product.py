"""The real product, from outside: a generated bundle, a `goondan run` daemon as a subprocess,
its control socket, its structured logs, and the product's frames made with its own codec.

Nothing here reaches into a running daemon: it is driven through `<state-root>/run/
agents.sock` and `control.sock` like any agent or CLI.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.driver import Driver
from bench.procs import PYTHON, Procs, bench_env, short_tmpdir

ECHO_REPLY = "You said: {{input}}"


def write_bundle(directory: Path, agents: list[str], entry: str) -> Path:
    """A swarm of scripted agents with no tools; each answers `You said: <input>` in one step.

    The agents go in `agents/<n>/agents.yaml` files of at most 90 documents (a file may hold
    100); the model and the swarm in `goondan.yaml`."""
    directory.mkdir(parents=True, exist_ok=True)
    model = (
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: echo}\nspec:\n"
        "  provider: scripted\n  model: scripted-v1\n"
        f"  options: {{default: {json.dumps(ECHO_REPLY)}}}\n"
    )
    refs = "".join(f'    - ref: "Agent/{name}"\n' for name in agents)
    swarm = (
        "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: default}\nspec:\n"
        f'  entryAgent: "Agent/{entry}"\n  agents:\n{refs}'
        "  policy:\n    shutdown: {gracePeriodSeconds: 2}\n"
    )
    (directory / "goondan.yaml").write_text("---\n".join([model, swarm]))
    for chunk in range(0, len(agents), 90):
        docs = [
            f"apiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {{name: {name}}}\n"
            'spec:\n  modelConfig: {modelRef: "Model/echo"}\n'
            for name in agents[chunk : chunk + 90]
        ]
        part = directory / "agents" / str(chunk // 90)
        part.mkdir(parents=True, exist_ok=True)
        (part / "agents.yaml").write_text("---\n".join(docs))
    return directory


class Daemon:
    """One `goondan run` in its own session, logs (JSON lines) to a file."""

    def __init__(
        self,
        procs: Procs,
        workdir: Path,
        agents: list[str],
        entry: str,
        run_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        """`run_args`: more options for `goondan run` (`--durability fsync`); `env`: more
        environment (`OTEL_TRACES_EXPORTER`)."""
        self.procs = procs
        self.run_args = list(run_args)
        self.env = env or {}
        self.bundle = write_bundle(workdir / "b", agents, entry)
        self.state_root = workdir / "s"
        self.log_path = workdir / "daemon.log"
        self.proc: subprocess.Popen[Any] | None = None

    @property
    def agents_endpoint(self) -> str:
        return f"ipc://{self.state_root / 'run' / 'agents.sock'}"

    def start(self, timeout_s: float = 30.0) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = self.procs.spawn(
                [
                    PYTHON,
                    "-m",
                    "goondan.cli.main",
                    "run",
                    str(self.bundle),
                    "--state-root",
                    str(self.state_root),
                    *self.run_args,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=bench_env(**self.env),
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"goondan run exited: {self.log_tail()}")
            if (self.state_root / "run" / "orchestrator.json").exists():
                with contextlib.suppress(Exception):
                    self.status()
                    break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"goondan run did not come up in {timeout_s:g}s: {self.log_tail()}")
        # The figures measure agents forked from a warm template (rehearsed, its objects
        # frozen); the first agents of a daemon do not wait for it (figure 10 measures those).
        while time.monotonic() < deadline and "subprocess" not in self.run_args:
            if self.log_events("agent template warm"):
                return
            time.sleep(0.02)

    def driver(self, name: str = "driver") -> Driver:
        """A requester on `agents.sock` as the swarm agent `name`, admitted with the
        operator's key: it says `ready` first, so the orchestrator routes to it like to any
        agent, and heartbeats while it waits."""
        return Driver(
            self.agents_endpoint,
            name,
            hello=ready_frame(name),
            heartbeat=heartbeat_frame(name),
            metadata=peer_key_metadata(self.agents_endpoint),
        )

    def _client(self) -> Any:
        from goondan.cli.client import ControlClient
        from goondan.paths import StatePaths

        return ControlClient(StatePaths.at(self.state_root))

    def status(self) -> dict[str, Any]:
        with self._client() as client:
            reply = client.command("status", timeout_s=10.0)
        if not reply.ok:
            raise RuntimeError(f"status failed: {reply.error}")
        result: dict[str, Any] = reply.result
        return result

    def processes(self) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in self.status().get("processes", [])}

    def agent_pids(self) -> dict[str, int]:
        return {name: row["pid"] for name, row in self.processes().items() if row.get("pid")}

    def wait_status(self, names: list[str], statuses: set[str], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            table = self.processes()
            if all(table.get(n, {}).get("status") in statuses for n in names):
                return True
            time.sleep(0.05)
        return False

    def stop(self, timeout_s: float = 20.0) -> None:
        """`stop` through the control socket, then SIGKILL whatever is left."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                with self._client() as client:
                    client.command("stop", timeout_s=5.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout_s)
        from bench.procs import kill_group

        kill_group(self.proc)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def log_events(self, event: str) -> list[dict[str, Any]]:
        """Every JSON log line whose `event` is `event`, with `ts` (epoch seconds) added."""
        found = []
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        for line in text.splitlines():
            if event not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") != event or "timestamp" not in record:
                continue
            with contextlib.suppress(ValueError, TypeError):
                stamp = datetime.datetime.fromisoformat(str(record["timestamp"]))
                if stamp.tzinfo is None:
                    stamp = stamp.replace(tzinfo=datetime.UTC)
                record["ts"] = stamp.timestamp()
                found.append(record)
        return found


@contextlib.contextmanager
def running(
    procs: Procs, workdir: Path, agents: list[str], entry: str, stop_timeout_s: float = 20.0
) -> Iterator[Daemon]:
    """A started daemon, stopped at the end."""
    daemon = Daemon(procs, workdir, agents, entry)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop(timeout_s=stop_timeout_s)


# -- the product's frames, made with its own codec ---------------------------------------------


def delegate_payload(text: str, instance_key: str, source: str, timeout_ms: int = 60_000) -> bytes:
    from ipc import wire

    payload = wire.Delegate(
        input=text,
        instance_key=instance_key,
        source=wire.Source("agent", source),
        timeout_ms=timeout_ms,
    )
    return bytes(wire.encode_payload(payload))


def result_payload(target: str, text: str, instance_key: str) -> bytes:
    """What a product agent answers to `delegate_payload(text, ...)` with the echo model."""
    from ipc import wire

    reply = ECHO_REPLY.replace("{{input}}", text)
    return bytes(
        wire.encode_payload(wire.DelegateResult("ok", target, reply, instance_key=instance_key))
    )


def peer_key_metadata(agents_endpoint: str) -> bytes:
    """The READY property (`Name:value`) that presents the daemon's operator key, read from
    `run/peer.key` beside its `agents.sock`: the orchestrator admits the bench's own agents
    with it, as external agents of their swarm."""
    from ipc.credential import CREDENTIAL_PROPERTY
    from orchestrator.trust import PEER_KEY_FILE

    run_dir = Path(agents_endpoint.removeprefix("ipc://")).parent
    return CREDENTIAL_PROPERTY + b":" + (run_dir / PEER_KEY_FILE).read_bytes().strip()


def ready_frame(name: str) -> bytes:
    from ipc import wire

    ready = wire.Ready(wire.PROTOCOL_VERSION, os.getpid(), name)
    return wire.encode(wire.READY, name, wire.ORCHESTRATOR, ready)


def heartbeat_frame(name: str) -> bytes:
    from ipc import wire

    return wire.encode(wire.HEARTBEAT, name, wire.ORCHESTRATOR)


@contextlib.contextmanager
def driven_run(
    agents: list[str], entry: str, stop_timeout_s: float = 20.0, under: Path | None = None
) -> Iterator[tuple[Procs, Daemon, Driver]]:
    """A started daemon in a temp dir of its own (in `under`, or the system's), whose swarm
    lists `agents` (`driver` among them), with the bench connected as `driver`: it says
    `ready`, so the orchestrator routes to it and never tries to start it. The `Procs` is for
    what the figure starts beside it; the daemon is stopped and every process killed at the
    end."""
    with (
        short_tmpdir(under) as tmp,
        Procs() as procs,
        running(procs, tmp / "p", agents, entry, stop_timeout_s) as daemon,
        daemon.driver() as drv,
    ):
        if not daemon.wait_status(["driver"], {"idle", "processing"}, 10):
            raise RuntimeError("the orchestrator did not take the driver's `ready`")
        yield procs, daemon, drv
