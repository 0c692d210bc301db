"""`instance show`'s rendering of one conversation: roles, calls, results, cut contents."""

from __future__ import annotations

import json

from goondan.cli.transcript import SHOW_ARGS_CHARS, SHOW_CHARS, SHOW_LINES, render_conversation
from goondan.messages import Message, ToolCall


def test_calls_results_and_errors_are_named() -> None:
    call = ToolCall("c1", "files__read", json.dumps({"path": "a.txt"}))
    failed = {"status": "error", "error": {"code": "E_TOOL", "message": "no such file"}}
    messages = [
        Message("1", "system", "be brief"),
        Message("2", "user", "read a.txt", metadata={"source": "cli:send"}),
        Message("3", "assistant", "Reading it.", tool_calls=(call,)),
        Message("4", "tool", json.dumps(failed), tool_call_id="c1"),
        Message("5", "tool", "not json", tool_call_id="gone", metadata={"toolName": "x__y"}),
        Message(
            "6", "tool", json.dumps({"status": "ok", "output": "two\nlines"}), tool_call_id="c1"
        ),
        Message("7", "assistant", "It is missing."),
    ]
    assert render_conversation(messages) == [
        "system:",
        "  be brief",
        "user (cli:send):",
        "  read a.txt",
        "assistant:",
        "  Reading it.",
        '  -> files__read {"path": "a.txt"}',
        "tool files__read: error",
        '  {"code": "E_TOOL", "message": "no such file"}',
        "tool x__y: ?",
        "  not json",
        "tool files__read: ok",
        "  two",
        "  lines",
        "assistant:",
        "  It is missing.",
    ]


def test_long_contents_are_cut_unless_full() -> None:
    many_lines = "\n".join(f"l{i}" for i in range(SHOW_LINES + 5))
    long_line = "x" * (SHOW_CHARS + 50)
    args = json.dumps({"text": "y" * SHOW_ARGS_CHARS})
    messages = [
        Message("1", "user", many_lines),
        Message("2", "user", long_line),
        Message("3", "assistant", tool_calls=(ToolCall("c", "t__w", args),)),
    ]
    lines = render_conversation(messages)
    kept = "\n".join(f"l{i}" for i in range(SHOW_LINES))
    assert lines[1 : SHOW_LINES + 2] == [f"  l{i}" for i in range(SHOW_LINES)] + [
        f"  … ({len(many_lines) - len(kept)} more chars)"
    ]
    assert f"  {'x' * SHOW_CHARS}" in lines and "  … (50 more chars)" in lines
    assert lines[-2:] == [
        "assistant:",
        f"  -> t__w {args[:SHOW_ARGS_CHARS]}… ({len(args) - SHOW_ARGS_CHARS} more chars)",
    ]

    full = render_conversation(messages, full=True)
    assert "more chars" not in "\n".join(full)
    assert f"  {long_line}" in full and f"  -> t__w {args}" in full
