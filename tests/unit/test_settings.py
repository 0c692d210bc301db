"""`goondan.settings`: every tunable in one frozen object, documented, validated, and handed
from `goondan run`'s flags down to agent processes."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from agentproc.main import parse_args
from goondan.cli.main import build_parser
from goondan.settings import (
    DEFAULTS,
    TABLE_END,
    TABLE_START,
    Settings,
    SettingsError,
    field_docs,
    from_run_args,
    markdown_table,
)
from orchestrator.launcher import LaunchSpec

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_the_defaults_pass_their_own_validation() -> None:
    assert Settings.from_mapping(msgspec.to_builtins(DEFAULTS)) == DEFAULTS
    assert Settings.from_mapping({}) == DEFAULTS


def test_every_field_has_a_description() -> None:
    for part in Settings.__struct_fields__:
        docs = field_docs(type(getattr(DEFAULTS, part)))
        assert docs, part
        undocumented = [name for name, (text, _) in docs.items() if len(text) < 10]
        assert not undocumented, f"{part}: {undocumented} need a description"


def test_settings_are_frozen() -> None:
    with pytest.raises(AttributeError):
        DEFAULTS.daemon.hang_timeout_s = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        DEFAULTS.agent = DEFAULTS.agent  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"daemon": {"hang_timeout_s": 0}}, "daemon.hang_timeout_s"),
        ({"daemon": {"agent_nice": 20}}, "daemon.agent_nice"),
        ({"storage": {"durability": "sometimes"}}, "storage.durability"),
        ({"agent": {"inbox_limit": "many"}}, "agent.inbox_limit"),
        ({"ipc": {"max_handshaking": 0}}, "ipc.max_handshaking"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting(data: dict[str, object], named: str) -> None:
    with pytest.raises(SettingsError, match=rf"^setting {named}: "):
        Settings.from_mapping(data)


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(SettingsError, match="unknown field `heartbeat_s`"):
        Settings.from_mapping({"agent": {"heartbeat_s": 1.0}})


def test_run_without_flags_gets_the_defaults() -> None:
    assert from_run_args(build_parser().parse_args(["run"])) == DEFAULTS


def test_run_flags_map_onto_their_fields() -> None:
    args = build_parser().parse_args(
        ["run", "--spawn", "subprocess", "--durability", "fsync"]
        + ["--hang-timeout", "3", "--agent-nice", "7"]
    )
    assert from_run_args(args).changed() == {
        "daemon": {"spawn": "subprocess", "hang_timeout_s": 3.0, "agent_nice": 7},
        "storage": {"durability": "fsync"},
    }


def test_send_waits_as_long_as_run_input_may_take_by_default() -> None:
    args = build_parser().parse_args(["send", "hi"])
    assert args.timeout * 1000 == DEFAULTS.daemon.input_timeout_ms


def test_an_agent_process_gets_the_settings_that_differ_from_the_defaults() -> None:
    settings = Settings.from_mapping(
        {"agent": {"heartbeat_interval_s": 0.5}, "storage": {"durability": "fsync"}}
    )
    argv = LaunchSpec(Path("b"), "s", "ipc:///x", Path("r"), settings).argv("a", 1)
    assert parse_args(argv).settings == settings
    assert "--nice" in argv and argv[argv.index("--nice") + 1] == "3"


def test_with_the_defaults_an_agent_gets_no_settings_argument() -> None:
    argv = LaunchSpec(Path("b"), "s", "ipc:///x", Path("r"), DEFAULTS).argv("a", 1)
    assert "--settings" not in argv
    assert parse_args(argv).settings is DEFAULTS


def test_the_defaults_table_in_the_docs_is_the_generated_one() -> None:
    text = OPERATIONS.read_text()
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    assert 0 <= start < end, f"docs/operations.md lacks the markers {TABLE_START!r}"
    documented = text[start : end + len(TABLE_END)]
    generated = markdown_table()
    assert documented == generated, (
        "docs/operations.md's settings table differs from goondan.settings; replace it with "
        "the output of `python -m goondan.settings --markdown`:\n\n" + generated
    )


def test_the_heartbeat_keeps_within_the_hang_timeout_and_metrics_interval() -> None:
    # Idle agents tick every 5 s by default (each tick wakes a process), yet a hang is
    # still noticed: at least three heartbeats fit in the hang timeout.
    assert DEFAULTS.heartbeat_interval_s() == 5.0
    short = Settings.from_mapping({"daemon": {"hang_timeout_s": 1.0}})
    assert short.heartbeat_interval_s() == pytest.approx(1 / 3)
    # With --metrics the counts ride on the heartbeat, at least once a second.
    assert DEFAULTS.heartbeat_interval_s(metrics=True) == 1.0
    fast = Settings.from_mapping({"agent": {"heartbeat_interval_s": 0.5}})
    assert fast.heartbeat_interval_s() == 0.5
