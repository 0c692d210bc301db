"""Each command's --help ends with what it prints on a terminal and on a pipe, and its exit
codes, each on its own line."""

from __future__ import annotations

import pytest

from goondan.cli.main import build_parser

COMMANDS = [
    ["validate"],
    ["run"],
    ["send"],
    ["status"],
    ["restart"],
    ["logs"],
    ["instance", "list"],
    ["instance", "show"],
    ["instance", "delete"],
    ["approvals"],
    ["approve"],
    ["deny"],
    ["stop"],
    ["studio"],
    ["tools", "list"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_says_what_it_prints_and_its_exit_codes(command, capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args([*command, "--help"])
    assert exit.value.code == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    prints = next(i for i, line in enumerate(lines) if line.startswith("prints: "))
    exits = next(i for i, line in enumerate(lines) if line.startswith("exit: 0 "))
    assert prints < exits
    assert "terminal" in " ".join(lines[prints:exits]) and "pipe" in " ".join(lines[prints:exits])


@pytest.mark.parametrize("command", [["instance", "delete", "k"], ["restart"]])
def test_destructive_commands_take_yes(command) -> None:
    assert build_parser().parse_args([*command, "--yes"]).yes
    assert build_parser().parse_args([*command, "-y"]).yes
