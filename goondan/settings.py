"""The daemon's and agents' tunables: one frozen `Settings`, documented field by field.

`goondan run` builds it from its flags (`from_run_args`) and hands it down: the daemon passes
each part to what it constructs, and agent processes get the fields that differ from the
defaults in their start arguments (`to_argv` / `from_argv`). Nothing reads a tunable from a
module global. What bundles set (`Swarm.spec.policy`, `Tool.spec.timeoutMs`, ...) and what
every peer of the wire must agree on (`ipc.zmtp.MAX_MESSAGE_BYTES`) are not here.

`python -m goondan.settings --markdown` prints the defaults table of docs/operations.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Annotated, Any, Literal

import msgspec

from ipc.router_limits import RouterLimits

LauncherKind = Literal["zygote", "subprocess"]
Durability = Literal["os", "fsync"]

KiB = 1024
MiB = 1024 * KiB

Seconds = Annotated[float, msgspec.Meta(gt=0)]


def _doc(text: str, flag: str | None = None) -> msgspec.Meta:
    return msgspec.Meta(description=text, extra={"flag": flag} if flag else {})


class DaemonSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The orchestrator: how it starts and supervises processes and routes requests."""

    spawn: Annotated[
        LauncherKind,
        _doc(
            "how agent processes start: forked from a template process that has imported the "
            "runtime and rehearsed a scripted agent once (ready in milliseconds, shared memory "
            "pages), or as fresh interpreters (simplest to debug)",
            "run --spawn",
        ),
    ] = "zygote"
    agent_nice: Annotated[
        int,
        msgspec.Meta(ge=0, le=19),
        _doc(
            "agents run this many steps lower in CPU priority than the daemon, so routing, "
            "heartbeats and the control socket get their turn while agents compute; kept small "
            "because a large one starves the agents' own turns",
            "run --agent-nice",
        ),
    ] = 3
    agent_scheduling: Annotated[
        Literal["batch", "normal"],
        _doc(
            "batch: an agent woken by a message does not preempt the process running (another "
            "agent in the middle of its turn) but waits for the scheduler's next pick, while "
            "the daemon, left normal, still preempts agents to route; fewer switches in the "
            "middle of turns when many agents compute at once. normal: as any process"
        ),
    ] = "batch"
    immortal_template: Annotated[
        bool,
        _doc(
            "on 64-bit CPython 3.12 and 3.13, the template makes the objects it has imported "
            "and rehearsed immortal before it forks agents (PEP 683): their reference counts "
            "are no longer written, so agents share those pages instead of each copying them "
            "(less memory per agent, warmer caches with many agents); such objects are never "
            "freed. Nothing changes on other interpreters"
        ),
    ] = True
    spare_agents: Annotated[
        int,
        msgspec.Meta(ge=0, le=8),
        _doc(
            "children the template keeps forked ahead of any launch, each done with what does "
            "not depend on the agent it becomes: a start or a respawn skips the fork and most "
            "of the set-up (each costs about half an idle agent's memory; 0 forks at every "
            "launch)"
        ),
    ] = 1
    hang_timeout_s: Annotated[
        Seconds,
        _doc(
            "a process that sent nothing (not even a heartbeat) for this long is hung: killed "
            "and respawned",
            "run --hang-timeout",
        ),
    ] = 15.0
    import_timeout_s: Annotated[
        Seconds,
        _doc(
            "a reload (and `goondan validate`) imports the bundle's Python entries in a "
            "throwaway process first and is refused if that takes longer than this",
            "run --import-timeout",
        ),
    ] = 10.0
    crash_threshold: Annotated[
        int,
        msgspec.Meta(ge=0),
        _doc("crashes in a row respawned at once; past them, respawns back off"),
    ] = 5
    crash_backoff_initial_s: Annotated[
        Seconds,
        _doc("the first back-off after `crash_threshold` crashes, doubled at each crash after"),
    ] = 1.0
    crash_backoff_max_s: Annotated[Seconds, _doc("the longest crash back-off")] = 300.0
    request_timeout_ms: Annotated[
        int,
        msgspec.Meta(gt=0),
        _doc("time limit of a request that names none (`agents__request` without `timeoutMs`)"),
    ] = 60_000
    input_timeout_ms: Annotated[
        int,
        msgspec.Meta(gt=0),
        _doc("time limit of `run --input`'s turn, and the default of `send --timeout`"),
    ] = 600_000
    max_deliveries: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("deliveries of one request: the first, and redeliveries after its agent crashed"),
    ] = 2
    replay_max_tries: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc(
            "a journaled input redelivered after a restart that fails with a crash or a timeout "
            "is tried this often before it is given up (one failing on a full disk, forever)"
        ),
    ] = 5
    replay_backoff_s: Annotated[
        Seconds, _doc("the wait before a journaled input's next try, doubled at each try")
    ] = 1.0
    replay_backoff_max_s: Annotated[
        Seconds, _doc("the longest wait between a journaled input's tries")
    ] = 60.0
    instance_drop_timeout_s: Annotated[
        Seconds,
        _doc("`instance delete` waits this long for a running agent to finish the turn"),
    ] = 30.0
    watch_interval_s: Annotated[
        Seconds, _doc("how often `run --watch` looks for changed bundle files")
    ] = 1.0
    control_connection_share: Annotated[
        float,
        msgspec.Meta(gt=0, lt=1),
        _doc(
            "the share of the open-file limit (past `ipc.fd_reserve`) that control.sock's "
            "connections may take; agents.sock may take the rest"
        ),
    ] = 0.25


class AgentSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An agent process: its liveness, loaded conversations and tool calls."""

    heartbeat_interval_s: Annotated[
        Seconds,
        _doc(
            "agents and connectors send a heartbeat this often when they send nothing else; "
            "never less often than three times per hang timeout, nor than once a second with "
            "--metrics (their counts ride on it)"
        ),
    ] = 5.0
    cancel_wait_s: Annotated[
        Seconds,
        _doc("at shutdown, after the grace period: how long cancelled turns get to wind down"),
    ] = 2.0
    quiet_s: Annotated[
        Seconds,
        _doc("an instance with no turn for this long is fsync'd and unloaded"),
    ] = 5.0
    max_loaded_instances: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("instances loaded at once; past it, the least recently used is fsync'd and unloaded"),
    ] = 256
    spare_conversations: Annotated[
        int,
        msgspec.Meta(ge=0, le=64),
        _doc(
            "new conversations' files an agent makes ahead, after a turn has answered, so that "
            "a conversation's first answer does not wait for the file system to make them "
            "(0: none)"
        ),
    ] = 2
    max_parked_workers: Annotated[
        int, msgspec.Meta(ge=0), _doc("idle instance workers kept for the next instances")
    ] = 8
    inbox_limit: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("messages waiting for an instance's next step; past it, the oldest is dropped"),
    ] = 256
    orchestrator_timeout_s: Annotated[
        Seconds, _doc("how long an agent waits for the orchestrator to answer a control call")
    ] = 10.0
    request_backstop_s: Annotated[
        Seconds,
        _doc(
            "an agent waits this long past a request's time limit for the orchestrator's "
            "timeout answer before it gives up by itself (a vanished orchestrator)"
        ),
    ] = 2.0
    tool_timeout_ms: Annotated[
        int,
        msgspec.Meta(gt=0),
        _doc("time limit of a tool call whose Tool sets no `spec.timeoutMs`"),
    ] = 900_000
    tool_threads: Annotated[
        int, msgspec.Meta(ge=1), _doc("synchronous tool handlers running at once")
    ] = 64
    max_abandoned_threads: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc(
            "synchronous tool calls that timed out but still run (a thread cannot be "
            "stopped); past them, synchronous tools wait for one to end"
        ),
    ] = 8


class StorageSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What is written to the state root, and when."""

    durability: Annotated[
        Durability,
        _doc(
            "os: conversation events are written to the OS before a turn answers or a tool "
            "runs (safe when a process crashes), fsync'd when the instance is quiet or "
            "unloaded; fsync: every event, a new conversation's directory entries, extension "
            "state and long-running tool records are fsync'd before going on (safe from "
            "power loss, slower), and so is each input from `goondan send` before it is "
            "routed. The journal's other inputs are fsync'd before they are acknowledged either "
            "way",
            "run --durability",
        ),
    ] = "os"
    fold_events_bytes: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("a conversation is folded into its base when its events pass this"),
    ] = 256 * KiB
    journal_sync_after_s: Annotated[
        Seconds,
        _doc(
            "with `os` durability, an input from `goondan send` still unanswered this long "
            "after it was accepted is fsync'd, in one fsync with the others accepted meanwhile; "
            "one answered sooner needs none (its requester, on this machine, cannot outlive a "
            "power loss)"
        ),
    ] = 0.01
    journal_compact_bytes: Annotated[
        int, msgspec.Meta(ge=1), _doc("`run/journal.jsonl` compacts itself past this")
    ] = 8 * MiB
    runtime_events_rotate_bytes: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("`runtime-events.jsonl` becomes `runtime-events.jsonl.1` past this"),
    ] = 16 * MiB
    runtime_events_flush_after_s: Annotated[
        Seconds,
        _doc(
            "runtime events are written in batches, due half to all of this after the first "
            "event of a batch (at once before a tool runs and on a failure)"
        ),
    ] = 1.0
    runtime_events_flush_slack_s: Annotated[
        Seconds,
        _doc(
            "when the agent goes quiet, a due batch is written this long after (or twice the "
            "time between its recent turns, if longer, up to runtime_events_flush_after_s)"
        ),
    ] = 0.1
    runtime_events_flush_count: Annotated[
        int, msgspec.Meta(ge=1), _doc("a batch of runtime events this long is written at once")
    ] = 256
    daemon_log_rotate_bytes: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc(
            "`logs/daemon.log` becomes `daemon.log.1` past this (the older ones shift up)",
            "run --log-rotate-bytes",
        ),
    ] = 10 * MiB
    daemon_log_files: Annotated[
        int,
        msgspec.Meta(ge=1),
        _doc("daemon log files kept: `daemon.log` and the rotated `daemon.log.1`, `.2`, ..."),
    ] = 5


METRICS_INTERVAL_S = 1.0  # with --metrics, the agents' counts travel at least this often


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every tunable of the daemon and its agents, by part."""

    daemon: DaemonSettings = msgspec.field(default_factory=DaemonSettings)
    agent: AgentSettings = msgspec.field(default_factory=AgentSettings)
    storage: StorageSettings = msgspec.field(default_factory=StorageSettings)
    ipc: RouterLimits = msgspec.field(default_factory=RouterLimits)

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Settings:
        """Settings from `{part: {field: value}}`; the rest keep their defaults. Raises
        SettingsError naming the field when a value is out of range or of the wrong type."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise SettingsError(_readable(str(exc))) from None

    def heartbeat_interval_s(self, metrics: bool = False) -> float:
        """How often a child that sent nothing else heartbeats: a hang is noticed only after
        the heartbeats it would have sent are missed, and every tick wakes a process (at
        1,000 idle agents, once a second each costs a fifth of a core)."""
        interval = min(self.agent.heartbeat_interval_s, self.daemon.hang_timeout_s / 3)
        return min(interval, METRICS_INTERVAL_S) if metrics else interval

    def changed(self) -> dict[str, dict[str, Any]]:
        """The fields that differ from the defaults, as `{part: {field: value}}`."""
        out: dict[str, dict[str, Any]] = {}
        for part in self.__struct_fields__:
            mine, default = getattr(self, part), getattr(DEFAULTS, part)
            diff = {
                name: getattr(mine, name)
                for name in mine.__struct_fields__
                if getattr(mine, name) != getattr(default, name)
            }
            if diff:
                out[part] = diff
        return out

    def to_argv(self) -> list[str]:
        """`--settings JSON` for a child process, or nothing when every field is a default."""
        changed = self.changed()
        return ["--settings", msgspec.json.encode(changed).decode()] if changed else []

    @classmethod
    def from_argv(cls, text: str | None) -> Settings:
        """The inverse of `to_argv` (None: the defaults)."""
        if not text:
            return DEFAULTS
        try:
            data = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            raise SettingsError(f"--settings is not JSON: {exc}") from None
        return cls.from_mapping(data)


class SettingsError(ValueError):
    """A value no setting accepts; the message names the setting."""


DEFAULTS = Settings()


def from_run_args(args: argparse.Namespace) -> Settings:
    """The settings `goondan run`'s flags ask for: the one place flags map onto fields."""
    return Settings.from_mapping(
        {
            "daemon": {
                "spawn": args.spawn,
                "agent_nice": args.agent_nice,
                "hang_timeout_s": args.hang_timeout,
                "import_timeout_s": args.import_timeout,
            },
            "storage": {
                "durability": args.durability,
                "daemon_log_rotate_bytes": args.log_rotate_bytes,
            },
        }
    )


def _readable(message: str) -> str:
    """msgspec's "Expected `int` >= 1 - at `$.agent.inbox_limit`" as
    "agent.inbox_limit: expected `int` >= 1"."""
    what, sep, where = message.rpartition(" - at `$.")
    if not sep:
        return f"invalid settings: {message}"
    return f"setting {where.rstrip('`')}: {what[:1].lower()}{what[1:]}"


# -- the defaults table of docs/operations.md ------------------------------------------------

TABLE_START = "<!-- settings table: generated by `python -m goondan.settings --markdown` -->"
TABLE_END = "<!-- end of settings table -->"


def markdown_table() -> str:
    """Every setting with its default, how to set it and what it does, as a Markdown table."""
    lines = [TABLE_START, "", "| setting | default | set by | what |", "| --- | --- | --- | --- |"]
    for part in Settings.__struct_fields__:
        group = getattr(DEFAULTS, part)
        for name, (description, flag) in field_docs(type(group)).items():
            value = _shown(name, getattr(group, name))
            how = f"`{flag}`" if flag else ""
            lines.append(f"| `{part}.{name}` | {value} | {how} | {description} |")
    lines += ["", TABLE_END]
    return "\n".join(lines)


def field_docs(cls: type[msgspec.Struct]) -> dict[str, tuple[str, str | None]]:
    """`{field: (description, flag)}` of a settings part; a field without a description is a
    bug the tests catch."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    docs: dict[str, tuple[str, str | None]] = {}
    for field in info.fields:
        meta = field.type
        if isinstance(meta, msgspec.inspect.Metadata):
            schema = meta.extra_json_schema or {}
            extra = meta.extra or {}
            docs[field.name] = (str(schema.get("description", "")), extra.get("flag"))
        else:
            docs[field.name] = ("", None)
    return docs


def _shown(name: str, value: object) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"  # as YAML and --set write it
    if isinstance(value, str):
        return f"`{value}`"
    if name.endswith("_bytes") and isinstance(value, int):
        for unit, size in (("MiB", MiB), ("KiB", KiB)):
            if value >= size:
                return f"{value / size:.4g} {unit}"
        return f"{value:,} B"
    if name.endswith("_ms") and isinstance(value, int):
        return f"{value / 1000:g} s"
    if name.endswith("_s") and isinstance(value, float):
        return f"{value:g} s"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m goondan.settings")
    parser.add_argument("--markdown", action="store_true", help="print the defaults table")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table())
    else:
        print(msgspec.json.format(msgspec.json.encode(DEFAULTS)).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
