"""The CLI refuses time limits that could never be met, before it talks to any daemon."""

from __future__ import annotations

import pytest

from goondan.cli.main import build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["send", "--timeout", "-5", "hi"],
        ["send", "--timeout", "0", "hi"],
        ["send", "--timeout", "nan", "hi"],
        ["stop", "--timeout", "-1"],
        ["run", "somewhere", "--hang-timeout", "-5"],
    ],
)
def test_a_time_limit_that_is_not_positive_is_refused(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(argv)
    assert exit.value.code == 2
    assert "must be a positive number of seconds" in capsys.readouterr().err


def test_a_positive_time_limit_is_taken() -> None:
    args = build_parser().parse_args(["send", "--timeout", "2.5", "hi"])
    assert args.timeout == 2.5
