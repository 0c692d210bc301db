"""Where state lives under the state root (`--state-root`, `GOONDAN_STATE_ROOT`, `~/.goondan`).

<root>/run/                  0700: sockets, lock, orchestrator.json
<root>/logs/                 0700: daemon.log (rotated), stderr.log (a detached daemon's)
<root>/swarms/<swarm>/instances/<instanceKey>/<agent>+events.jsonl   conversation (and +base)
<root>/swarms/<swarm>/instances/<instanceKey>/<agent>/   its other state, made when needed
<root>/swarms/<swarm>/agents/<agent>/                     the agent's runtime events
<root>/swarms/<swarm>/workspaces/<instanceKey>/          tool working directory
<root>/swarms/<swarm>/spares/<agent>/                     new conversations' files made ahead

Every `<instanceKey>`, `<swarm>` and `<agent>` above is its `storage_name`, one directory
name per key and never the same for two.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import urllib.parse
from pathlib import Path

import msgspec

from ipc.error_codes import ErrorCode

MAX_KEY_BYTES = 1024  # an instance key longer than this is refused
MAX_NAME_CHARS = 128  # a directory name (well under the 255 bytes of a path component)
_HASHED_HEAD = 80
_READABLE = re.compile(r"[A-Za-z0-9_:-](?:[A-Za-z0-9._:-]{0,126}[A-Za-z0-9_:-])?")
_PLAIN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:-")


class BadInstanceKey(ValueError):
    """An instance key that cannot name a directory: answered as `E_BAD_INSTANCE_KEY`."""

    code = ErrorCode.E_BAD_INSTANCE_KEY


class StorageError(Exception):
    """A write that state depends on failed (disk full, I/O error): answered as `E_STORAGE`."""

    code = ErrorCode.E_STORAGE

    def __init__(self, what: str, path: Path, cause: OSError) -> None:
        reason = cause.strerror or str(cause)
        super().__init__(f"could not write {what} to {path}: {reason}")
        self.path = path


def default_state_root() -> Path:
    env = os.environ.get("GOONDAN_STATE_ROOT")
    return Path(env) if env else Path.home() / ".goondan"


def storage_name(key: str) -> str:
    """The directory name of an instance key (or a swarm or agent name): one name per key,
    never the same for two keys, and a single safe path component.

    A readable key (letters, digits, `_`, `-`, `:` and inner `.`, up to 128 characters) is its
    own name, as it always was. Any other key is percent-encoded byte by byte (UTF-8; `.` and
    `%` included), so its name holds a `%` that no readable name does; an encoded name past
    128 characters keeps its first part and gets `%~` and a hash of the key. Raises
    `BadInstanceKey` for a key that cannot be stored (empty, holding NUL, too long)."""
    if _READABLE.fullmatch(key):
        return key
    if not key or "\0" in key or len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        shown = repr(key) if len(key) <= 40 else repr(key[:40]) + "..."
        raise BadInstanceKey(
            f"instance key {shown} cannot be stored: it must be 1 to {MAX_KEY_BYTES} bytes "
            "of UTF-8 without NUL"
        )
    raw = key.encode("utf-8", "surrogatepass")
    encoded = "".join(chr(b) if b in _PLAIN_BYTES else f"%{b:02X}" for b in raw)
    if len(encoded) <= MAX_NAME_CHARS:
        return encoded
    head = encoded[:_HASHED_HEAD]
    if "%" in head[-2:]:  # do not cut an escape in half
        head = head[: head.rindex("%")]
    return f"{head}%~{hashlib.sha256(raw).hexdigest()[:32]}"


def key_of(name: str) -> str | None:
    """The key a `storage_name` stands for; None for a hashed name (the key is too long to
    be read back from its name)."""
    if "%~" in name:
        return None
    if "%" not in name:
        return name
    return urllib.parse.unquote_to_bytes(name).decode("utf-8", "surrogatepass")


class StatePaths(msgspec.Struct, frozen=True):
    root: Path

    @classmethod
    def at(cls, root: str | Path | None) -> StatePaths:
        return cls(Path(root).expanduser().absolute() if root else default_state_root())

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def last_error_dir(self) -> Path:
        """`<name>`: the last error line each agent or connector logged (for `status`)."""
        return self.run_dir / "last-error"

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
    def approvals_file(self) -> Path:
        return self.run_dir / "approvals.jsonl"

    @property
    def info_file(self) -> Path:
        return self.run_dir / "orchestrator.json"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def daemon_log(self) -> Path:
        """The daemon's log (JSON lines, rotated); a detached daemon's agents' too."""
        return self.logs_dir / "daemon.log"

    @property
    def stderr_log(self) -> Path:
        """A detached daemon's own standard output and error: what it prints outside its log
        (a fatal traceback)."""
        return self.logs_dir / "stderr.log"

    def swarm_dir(self, swarm: str) -> Path:
        return self.root / "swarms" / storage_name(swarm)

    def swarm(self, swarm: str) -> SwarmPaths:
        directory = self.swarm_dir(swarm)
        return SwarmPaths(directory / "instances", directory / "workspaces", directory / "spares")

    def instance_dir(self, swarm: str, instance_key: str) -> Path:
        return self.swarm(swarm).instance_dir(instance_key)

    def conversation_dir(self, swarm: str, instance_key: str, agent: str) -> Path:
        return self.swarm(swarm).conversation_dir(instance_key, agent)

    def agent_dir(self, swarm: str, agent: str) -> Path:
        return self.swarm(swarm).agent_dir(agent)

    def stored_swarms(self, instance_key: str) -> list[str]:
        """The swarms (directory names) that hold a stored instance `instance_key`."""
        found = (self.root / "swarms").glob(f"*/instances/{storage_name(instance_key)}")
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


def instance_dir_text(instances: str, instance_key: str) -> str:
    """`SwarmPaths.instance_dir` as text, under `instances` (its text): a conversation's first
    request renames a spare onto it, and a `Path` handed to the OS is parsed and its parts
    interned first (microseconds on that request's cold caches)."""
    return f"{instances}/{storage_name(instance_key)}"


class SwarmPaths(msgspec.Struct, frozen=True):
    """One swarm's directories. An agent keeps its swarm's: it makes paths under them for
    every new conversation, and each `/` re-parses (microseconds on a cold cache)."""

    instances: Path
    workspaces: Path
    spares: Path  # new conversations' files an agent made ahead (agentproc.spare_files)

    def instance_dir(self, instance_key: str) -> Path:
        return self.instances / storage_name(instance_key)

    def conversation_dir(self, instance_key: str, agent: str) -> Path:
        return self.instances.joinpath(storage_name(instance_key), storage_name(agent))

    def workdir(self, instance_key: str) -> Path:
        return self.workspaces / storage_name(instance_key)

    def cwd_file(self, instance_key: str, agent: str) -> Path:
        """Where `agents__spawn` records the working directory it gave an instance."""
        return self.conversation_dir(instance_key, agent) / CWD_FILE

    def agent_dir(self, agent: str) -> Path:
        """What an agent keeps across its instances (its runtime events)."""
        return self.instances.parent / "agents" / storage_name(agent)


# -- conversations on disk: `<agent>+events.jsonl` beside `<agent>/` (agentproc.conversation) --

EVENTS_SUFFIX = "+events.jsonl"
BASE_SUFFIX = "+base.jsonl"
_LEGACY_EVENTS = "events.jsonl"  # inside the instance's directory, before `+events.jsonl`
_LEGACY_BASE = "base.jsonl"
CWD_FILE = "cwd"  # in the instance's directory: the working directory `agents__spawn` gave it


def conversation_files(directory: Path) -> tuple[Path, Path, bool]:
    """(base, events, legacy) of the conversation of the instance directory `directory`
    (`instances/<key>/<agent>`): its files beside the directory, or inside it when a
    conversation was stored there before (`legacy`), and nothing beside it was."""
    home, name = directory.parent, directory.name
    base, events = home / (name + BASE_SUFFIX), home / (name + EVENTS_SUFFIX)
    if not (events.exists() or base.exists()):
        old_base, old_events = directory / _LEGACY_BASE, directory / _LEGACY_EVENTS
        if old_events.exists() or old_base.exists():
            return old_base, old_events, True
    return base, events, False


def recorded_cwd(directory: Path) -> Path | None:
    """The tools' working directory `agents__spawn(cwd=...)` recorded for the instance
    directory `directory` (`instances/<key>/<agent>`), if it recorded one."""
    try:
        recorded = (directory / CWD_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return Path(recorded) if recorded else None


def conversation_stored(directory: Path) -> bool:
    """Whether the instance directory `directory` has a conversation on disk, in either
    layout."""
    base, events, _ = conversation_files(directory)
    return events.exists() or base.exists()


def stored_agents(instance_dir: Path) -> list[Path]:
    """The instance directories (`instances/<key>/<agent>`, made yet or not) of the agents
    that keep something under the instance key's directory `instance_dir`, a conversation in
    either layout or a directory, sorted by name."""
    names: set[str] = set()
    try:
        entries = list(instance_dir.iterdir())
    except OSError:
        return []
    for entry in entries:
        for suffix in (EVENTS_SUFFIX, BASE_SUFFIX):
            if entry.name.endswith(suffix):
                names.add(entry.name.removesuffix(suffix))
                break
        else:
            if entry.is_dir():
                names.add(entry.name)
    return [instance_dir / name for name in sorted(names)]


def delete_conversation(directory: Path) -> bool:
    """Remove what the instance directory `directory` keeps: the directory and the
    conversation beside it. False when there was nothing."""
    existed = directory.exists()
    shutil.rmtree(directory, ignore_errors=True)
    for suffix in (EVENTS_SUFFIX, BASE_SUFFIX, BASE_SUFFIX + ".tmp"):
        with contextlib.suppress(FileNotFoundError):
            directory.with_name(directory.name + suffix).unlink()
            existed = True
    return existed
