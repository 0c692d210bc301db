"""The tests' wait helpers: a timed-out wait names what it waited for."""

from __future__ import annotations

import pytest

from tests.waiting import until, wait_for


def test_wait_for_returns_the_first_truthy_value() -> None:
    answers = iter([0, None, "ready"])
    assert wait_for(lambda: next(answers), timeout=5, interval=0) == "ready"


def test_a_timed_out_wait_names_the_lambda_it_waited_for() -> None:
    got: list[int] = []
    with pytest.raises(AssertionError) as info:
        wait_for(lambda: len(got) == 2, timeout=0)
    assert str(info.value) == "timed out after 0s waiting for len(got) == 2 (last: False)"


def test_a_lambda_over_several_lines_is_named_whole() -> None:
    received_frames: list[int] = []
    with pytest.raises(AssertionError) as info:
        wait_for(
            lambda: (
                len(received_frames) == 2  # a comment
                and received_frames[0] == received_frames[1] == 1234567890
            ),
            timeout=0,
        )
    assert "waiting for len(received_frames) == 2 and received_frames[0] == " in str(info.value)


async def test_until_names_a_function_or_what_it_was_told() -> None:
    def listening() -> bool:
        return False

    with pytest.raises(AssertionError, match="waiting for listening "):
        await until(listening, 0)
    with pytest.raises(AssertionError, match="waiting for the daemon's socket "):
        await until(listening, 0, what="the daemon's socket")
    assert await until(lambda: [1], 0) == [1]
