"""The CLI as a user runs it: real `goondan` processes, real sockets, real files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_for as wait_for  # the e2e tests import it from here

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "configs" / "quickstart"
GOONDAN = [sys.executable, "-m", "goondan.cli.main"]


def goondan(
    *args: str, timeout: float = 60, check: bool = False, **kw
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*GOONDAN, *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"goondan {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


@pytest.fixture
def state_root() -> Iterator[Path]:
    # Short on purpose: unix socket paths are limited to 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="gd-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_bundle(directory: Path, yaml_text: str, files: dict[str, str] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "goondan.yaml").write_text(textwrap.dedent(yaml_text))
    for name, text in (files or {}).items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    return directory


class Daemon:
    """`goondan run` in the background, as a user would leave it running."""

    def __init__(
        self, bundle: Path, state_root: Path, *extra: str, env: dict[str, str] | None = None
    ) -> None:
        self.state_root = state_root
        self.stderr_path = state_root / "daemon.stderr"
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [*GOONDAN, "run", str(bundle), "--state-root", str(state_root), *extra],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.wait_ready()

    def wait_ready(self, timeout: float = 20) -> None:
        ready = self.state_root / "run" / "orchestrator.json"
        try:
            wait_for(lambda: self.proc.poll() is not None or ready.exists(), timeout)
        except AssertionError as exc:
            raise AssertionError(f"daemon not ready: {exc}\n{self.logs()}") from None
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited {self.proc.returncode}: {self.logs()}")

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return goondan(*args, "--state-root", str(self.state_root), timeout=timeout)

    def send(self, text: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.cli("send", text, *args, timeout=timeout)

    def status(self) -> dict[str, Any]:
        proc = self.cli("status", "--json")
        assert proc.returncode == 0, proc.stderr
        status: dict[str, Any] = json.loads(proc.stdout)
        return status

    def process(self, name: str) -> dict[str, Any]:
        return next(p for p in self.status()["processes"] if p["name"] == name)

    def logs(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode


@pytest.fixture
def start_daemon(state_root: Path) -> Iterator[Callable[..., Daemon]]:
    daemons: list[Daemon] = []

    def start(bundle: Path = QUICKSTART, *extra: str, env: dict[str, str] | None = None) -> Daemon:
        daemon = Daemon(bundle, state_root, *extra, env=env)
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        daemon.stop()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def solo_bundle(
    directory: Path,
    *,
    rules: list[dict[str, Any]] | None = None,
    tool: str | None = None,
    code: str = "",
    base_tools: tuple[str, ...] = (),
    grace_s: float | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """A one-agent swarm (`solo`) on the scripted model, for supervision tests: its `rules`,
    an optional local Tool `<tool>` (export `run`, module `code`), and @goondan/base tools."""
    import yaml

    api = "goondan.ai/v1"
    options = {"rules": rules} if rules else {}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": api,
            "kind": "Model",
            "metadata": {"name": "m"},
            "spec": {"provider": "scripted", "model": "s", "options": options},
        }
    ]
    refs: list[dict[str, Any]] = [
        {"ref": {"kind": "Tool", "name": name, "package": "@goondan/base"}} for name in base_tools
    ]
    if tool is not None:
        export = {"name": "run", "description": "a test tool", "parameters": {"type": "object"}}
        docs.append(
            {
                "apiVersion": api,
                "kind": "Tool",
                "metadata": {"name": tool},
                "spec": {"entry": f"./{tool}.py", "exports": [export]},
            }
        )
        refs.insert(0, {"ref": f"Tool/{tool}"})
    docs.append(
        {
            "apiVersion": api,
            "kind": "Agent",
            "metadata": {"name": "solo"},
            "spec": {"modelConfig": {"modelRef": "Model/m"}, "tools": refs},
        }
    )
    swarm: dict[str, Any] = {"entryAgent": "Agent/solo", "agents": [{"ref": "Agent/solo"}]}
    if grace_s is not None:
        swarm["policy"] = {"shutdown": {"gracePeriodSeconds": grace_s}}
    docs.append(
        {"apiVersion": api, "kind": "Swarm", "metadata": {"name": "default"}, "spec": swarm}
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "goondan.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    if tool is not None:
        (directory / f"{tool}.py").write_text(textwrap.dedent(code))
    for name, text in (files or {}).items():
        (directory / name).write_text(text)
    return directory
