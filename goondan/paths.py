"""Where state lives under the state root (`--state-root`, `GOONDAN_STATE_ROOT`, `~/.goondan`).

<root>/run/                  0700: sockets, lock, orchestrator.json
<root>/swarms/<swarm>/instances/<instanceKey>/<agent>/   conversation (base/events.jsonl)
<root>/swarms/<swarm>/agents/<agent>/                     the agent's runtime events
<root>/swarms/<swarm>/workspaces/<instanceKey>/          tool working directory
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import msgspec

_SLUG_UNSAFE = re.compile(r"[^a-zA-Z0-9._:-]+")


class StorageError(Exception):
    """A write that state depends on failed (disk full, I/O error): answered as `E_STORAGE`."""

    code = "E_STORAGE"

    def __init__(self, what: str, path: Path, cause: OSError) -> None:
        reason = cause.strerror or str(cause)
        super().__init__(f"could not write {what} to {path}: {reason}")
        self.path = path


def default_state_root() -> Path:
    env = os.environ.get("GOONDAN_STATE_ROOT")
    return Path(env) if env else Path.home() / ".goondan"


def slug(key: str) -> str:
    """A file-name-safe form of an instance key or swarm name (at most 128 characters)."""
    cleaned = _SLUG_UNSAFE.sub("-", key).strip("-.")[:128]
    return cleaned or "default"


class StatePaths(msgspec.Struct, frozen=True):
    root: Path

    @classmethod
    def at(cls, root: str | Path | None) -> StatePaths:
        return cls(Path(root).expanduser().absolute() if root else default_state_root())

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def agents_socket(self) -> Path:
        return self.run_dir / "agents.sock"

    @property
    def control_socket(self) -> Path:
        return self.run_dir / "control.sock"

    @property
    def lock_file(self) -> Path:
        return self.run_dir / "orchestrator.lock"

    @property
    def journal_file(self) -> Path:
        return self.run_dir / "journal.jsonl"

    @property
    def info_file(self) -> Path:
        return self.run_dir / "orchestrator.json"

    def swarm_dir(self, swarm: str) -> Path:
        return self.root / "swarms" / slug(swarm)

    def swarm(self, swarm: str) -> SwarmPaths:
        directory = self.swarm_dir(swarm)
        return SwarmPaths(directory / "instances", directory / "workspaces")

    def instance_dir(self, swarm: str, instance_key: str) -> Path:
        return self.swarm(swarm).instance_dir(instance_key)

    def conversation_dir(self, swarm: str, instance_key: str, agent: str) -> Path:
        return self.swarm(swarm).conversation_dir(instance_key, agent)

    def agent_dir(self, swarm: str, agent: str) -> Path:
        return self.swarm(swarm).agent_dir(agent)

    def stored_swarms(self, instance_key: str) -> list[str]:
        """The swarms (directory names) that hold a stored instance `instance_key`."""
        found = (self.root / "swarms").glob(f"*/instances/{slug(instance_key)}")
        return sorted(d.parent.parent.name for d in found)

    def delete_instance(self, swarm: str, instance_key: str, *, workdir: bool) -> bool:
        """Remove an instance's conversations (and its tools' workdir with `workdir`); False
        when nothing was stored."""
        directory = self.instance_dir(swarm, instance_key)
        existed = directory.exists()
        shutil.rmtree(directory, ignore_errors=True)
        if workdir:
            shutil.rmtree(self.workdir(swarm, instance_key), ignore_errors=True)
        return existed

    def workdir(self, swarm: str, instance_key: str) -> Path:
        return self.swarm(swarm).workdir(instance_key)


class SwarmPaths(msgspec.Struct, frozen=True):
    """One swarm's directories. An agent keeps its swarm's: it makes paths under them for
    every new conversation, and each `/` re-parses (microseconds on a cold cache)."""

    instances: Path
    workspaces: Path

    def instance_dir(self, instance_key: str) -> Path:
        return self.instances / slug(instance_key)

    def conversation_dir(self, instance_key: str, agent: str) -> Path:
        return self.instances.joinpath(slug(instance_key), slug(agent))

    def workdir(self, instance_key: str) -> Path:
        return self.workspaces / slug(instance_key)

    def agent_dir(self, agent: str) -> Path:
        """What an agent keeps across its instances (its runtime events)."""
        return self.instances.parent / "agents" / slug(agent)
