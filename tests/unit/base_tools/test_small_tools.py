"""wait, self-restart, json-query and text-transform: every export, happy and error paths."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from base_tools import json_query, self_restart, text_transform, wait
from goondan import ToolContext, ToolError
from tests import virtual_clock

DOC = json.dumps(
    {
        "users": [{"name": "Alice", "email": "a@x"}, {"name": "Bob", "tags": ["x", "y"]}],
        "items": [1, [2, [3, [4]]]],
        "meta": {"count": 2, "ok": True, "none": None, "odd key": "v"},
        "title": "héllo",
    }
)


# --- wait -----------------------------------------------------------------------------------------


def test_wait_seconds(ctx: ToolContext) -> None:
    async def waited(seconds: float) -> tuple[dict[str, Any], float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        out = await wait.handlers["seconds"](ctx, {"seconds": seconds})
        return out, loop.time() - started

    # On a virtual clock: the loop's time moves exactly as far as the tool waited.
    assert virtual_clock.run(waited(0.05)) == ({"waitedSeconds": 0.05, "waitedMs": 50}, 0.05)
    assert virtual_clock.run(waited(0)) == ({"waitedSeconds": 0, "waitedMs": 0}, 0)
    assert virtual_clock.run(waited(300)) == ({"waitedSeconds": 300, "waitedMs": 300000}, 300)


@pytest.mark.parametrize("seconds", [-1, 301, float("nan"), float("inf")])
async def test_wait_refuses_out_of_range(ctx: ToolContext, seconds: float) -> None:
    with pytest.raises(ToolError) as info:
        await wait.handlers["seconds"](ctx, {"seconds": seconds})
    assert info.value.code == "E_TOOL_INVALID_ARGS"


# --- self-restart ---------------------------------------------------------------------------------


def test_self_restart_request(ctx: ToolContext) -> None:
    request = self_restart.handlers["request"]
    assert request(ctx, {"reason": "Updated configuration"}) == {
        "ok": True,
        "restartRequested": True,
        "restartReason": "Updated configuration",
    }
    assert request(ctx, {})["restartReason"] == "tool:self-restart"
    assert request(ctx, {"reason": "  "})["restartReason"] == "tool:self-restart"


# --- json-query -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, found, value",
    [
        ("users[0].name", True, "Alice"),
        (".users[1].tags[-1]", True, "y"),
        ("$.meta.count", True, 2),
        ('meta["odd key"]', True, "v"),
        ("meta.none", True, None),
        (".", True, json.loads(DOC)),
        ("users[5].name", False, None),
        ("meta.missing", False, None),
        ("title.length", False, None),
    ],
)
def test_query(ctx: ToolContext, path: str, found: bool, value: object) -> None:
    assert json_query.handlers["query"](ctx, {"data": DOC, "path": path}) == {
        "path": path,
        "found": found,
        "value": value,
    }


def test_query_default_path(ctx: ToolContext) -> None:
    assert json_query.handlers["query"](ctx, {"data": "[1]"}) == {
        "path": ".",
        "found": True,
        "value": [1],
    }


def test_pick(ctx: ToolContext) -> None:
    data = json.dumps({"name": "Alice", "email": "a@x", "age": 3})
    assert json_query.handlers["pick"](ctx, {"data": data, "keys": ["name", "email", "nope"]}) == {
        "keys": ["name", "email", "nope"],
        "result": {"name": "Alice", "email": "a@x"},
    }


@pytest.mark.parametrize(
    "path, count, kind",
    [
        ("users", 2, "array"),
        ("meta", 4, "object"),
        ("title", 5, "string"),
        ("meta.count", 1, "number"),
        ("meta.ok", 1, "boolean"),
        ("meta.none", 0, "null"),
        ("missing", 0, "null"),
    ],
)
def test_count(ctx: ToolContext, path: str, count: int, kind: str) -> None:
    assert json_query.handlers["count"](ctx, {"data": DOC, "path": path}) == {
        "path": path,
        "count": count,
        "type": kind,
    }


@pytest.mark.parametrize(
    "depth, result",
    [
        (None, [1, 2, [3, [4]]]),
        (0, [1, [2, [3, [4]]]]),
        (2, [1, 2, 3, [4]]),
        (9, [1, 2, 3, 4]),
    ],
)
def test_flatten(ctx: ToolContext, depth: int | None, result: list[Any]) -> None:
    args = {"data": "[1, [2, [3, [4]]]]"} | ({} if depth is None else {"depth": depth})
    assert json_query.handlers["flatten"](ctx, args) == {
        "depth": 1 if depth is None else depth,
        "count": len(result),
        "result": result,
    }


@pytest.mark.parametrize(
    "export, args, code",
    [
        ("query", {"data": "{nope"}, "E_INVALID_JSON"),
        ("query", {"data": "{}", "path": "a..b"}, "E_INVALID_PATH"),
        ("query", {"data": "{}", "path": "a[x]"}, "E_INVALID_PATH"),
        ("pick", {"data": "[1]", "keys": ["a"]}, "E_JSON_TYPE"),
        ("count", {"data": ""}, "E_INVALID_JSON"),
        ("flatten", {"data": "{}"}, "E_JSON_TYPE"),
        ("flatten", {"data": "[]", "depth": -1}, "E_TOOL_INVALID_ARGS"),
    ],
)
def test_json_query_errors(ctx: ToolContext, export: str, args: dict[str, Any], code: str) -> None:
    with pytest.raises(ToolError) as info:
        json_query.handlers[export](ctx, args)
    assert info.value.code == code


# --- text-transform -------------------------------------------------------------------------------

tt = text_transform.handlers


def test_replace_first_and_all(ctx: ToolContext) -> None:
    text = "hello world hello"
    assert tt["replace"](ctx, {"text": text, "search": "hello", "replacement": "hi"}) == {
        "original": text,
        "result": "hi world hello",
        "replacements": 1,
    }
    assert (
        tt["replace"](ctx, {"text": text, "search": "hello", "replacement": "hi", "all": True})[
            "result"
        ]
        == "hi world hi"
    )
    assert tt["replace"](ctx, {"text": text, "search": "l"})["result"] == "helo world hello"
    assert tt["replace"](ctx, {"text": text, "search": "zzz"})["replacements"] == 0


@pytest.mark.parametrize(
    "args, result, start, end",
    [
        ({}, "hello world", 0, 11),
        ({"start": 0, "end": 5}, "hello", 0, 5),
        ({"start": -5}, "world", 6, 11),
        ({"start": 3, "end": 1}, "", 3, 3),
        ({"start": 2, "end": 100}, "llo world", 2, 11),
    ],
)
def test_slice(ctx: ToolContext, args: dict[str, Any], result: str, start: int, end: int) -> None:
    assert tt["slice"](ctx, {"text": "hello world", **args}) == {
        "original": "hello world",
        "result": result,
        "start": start,
        "end": end,
        "length": len(result),
    }


@pytest.mark.parametrize(
    "args, parts",
    [
        ({"text": "line1\nline2\nline3"}, ["line1", "line2", "line3"]),
        ({"text": "a,b,c,d", "delimiter": ",", "maxParts": 2}, ["a", "b,c,d"]),
        ({"text": "abc", "delimiter": ""}, ["a", "b", "c"]),
        ({"text": "abcd", "delimiter": "", "maxParts": 2}, ["a", "bcd"]),
    ],
)
def test_split(ctx: ToolContext, args: dict[str, Any], parts: list[str]) -> None:
    out = tt["split"](ctx, args)
    assert out == {"delimiter": args.get("delimiter", "\n"), "count": len(parts), "parts": parts}


def test_join(ctx: ToolContext) -> None:
    assert tt["join"](ctx, {"parts": ["a", 2, 2.5, 3.0, True], "delimiter": ", "}) == {
        "delimiter": ", ",
        "count": 5,
        "result": "a, 2, 2.5, 3, true",
    }
    assert tt["join"](ctx, {"parts": ["x", "y"]})["result"] == "x\ny"


@pytest.mark.parametrize(
    "mode, result", [("both", "hello"), ("start", "hello  "), ("end", "  hello")]
)
def test_trim(ctx: ToolContext, mode: str, result: str) -> None:
    assert tt["trim"](ctx, {"text": "  hello  ", "mode": mode}) == {
        "original": "  hello  ",
        "result": result,
        "mode": mode,
        "trimmedLength": 9 - len(result),
    }


def test_case(ctx: ToolContext) -> None:
    assert tt["case"](ctx, {"text": "Hello World", "to": "upper"}) == {
        "original": "Hello World",
        "result": "HELLO WORLD",
        "to": "upper",
    }
    assert tt["case"](ctx, {"text": "Hello World", "to": "lower"})["result"] == "hello world"


@pytest.mark.parametrize(
    "export, args",
    [
        ("replace", {"text": "x", "search": ""}),
        ("slice", {"text": "x", "start": 1.5}),
        ("split", {"text": "x", "maxParts": 0}),
        ("join", {"parts": [{"a": 1}]}),
        ("trim", {"text": "x", "mode": "middle"}),
        ("case", {"text": "x", "to": "title"}),
    ],
)
def test_text_transform_errors(ctx: ToolContext, export: str, args: dict[str, Any]) -> None:
    with pytest.raises(ToolError) as info:
        tt[export](ctx, args)
    assert info.value.code == "E_TOOL_INVALID_ARGS"
