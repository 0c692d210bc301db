"""Argument problems as a model can fix them: every problem, named by its path."""

import pytest

from agentproc.tool_args import ArgumentsError, parse_arguments, problems, summarize

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "mode": {"enum": ["fast", "safe"]},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        "opts": {
            "type": "object",
            "required": ["level"],
            "properties": {"level": {"type": ["integer", "null"]}},
            "additionalProperties": {"type": "string"},
        },
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "fixed": {"const": 3},
    },
}


@pytest.mark.parametrize(
    "args, expected",
    [
        ({"name": "ok"}, []),
        ({}, ["args.name: required property is missing"]),
        (
            {"name": "ok", "x": 1},
            [
                "args.x: unexpected property (allowed: name, count, "
                "ratio, mode, flag, tags, opts, either, fixed)"
            ],
        ),
        ({"name": 3}, ["args.name: must be a string, got integer"]),
        ({"name": "a"}, ["args.name: must be at least 2 characters long"]),
        ({"name": "abcdef"}, ["args.name: must be at most 5 characters long"]),
        ({"name": "AB"}, ["args.name: must match the pattern ^[a-z]+$"]),
        ({"name": "ok", "count": 0}, ["args.count: must be >= 1, got 0"]),
        ({"name": "ok", "count": 11}, ["args.count: must be <= 10, got 11"]),
        ({"name": "ok", "count": 2.0}, []),
        ({"name": "ok", "count": 2.5}, ["args.count: must be an integer, got number"]),
        ({"name": "ok", "count": True}, ["args.count: must be an integer, got boolean"]),
        ({"name": "ok", "ratio": 1}, ["args.ratio: must be < 1, got 1"]),
        ({"name": "ok", "mode": "slow"}, ["args.mode: must be one of fast, safe"]),
        ({"name": "ok", "flag": 1}, ["args.flag: must be a boolean, got integer"]),
        ({"name": "ok", "tags": []}, ["args.tags: must have at least 1 item"]),
        (
            {"name": "ok", "tags": ["a", 2, "c"]},
            [
                "args.tags: must have at most 2 items",
                "args.tags[1]: must be a string, got integer",
            ],
        ),
        (
            {"name": "ok", "opts": {"level": "hi"}},
            [
                "args.opts.level: must be an integer or null, got string",
            ],
        ),
        (
            {"name": "ok", "opts": {"other": 1}},
            [
                "args.opts.level: required property is missing",
                "args.opts.other: must be a string, got integer",
            ],
        ),
        ({"name": "ok", "either": []}, ["args.either: does not match any of the allowed forms"]),
        ({"name": "ok", "fixed": 4}, ["args.fixed: must be 3"]),
    ],
)
def test_problems(args, expected):
    assert problems(SCHEMA, args) == expected


def test_summary_lists_five_and_counts_the_rest():
    found = [f"p{i}" for i in range(8)]
    assert summarize(found) == "p0; p1; p2; p3; p4; +3 more issues"
    assert summarize(found[:6]) == "p0; p1; p2; p3; p4; +1 more issue"
    assert summarize(found[:2]) == "p0; p1"


@pytest.mark.parametrize("text, value", [("", {}), ("  ", {}), ('{"a": 1}', {"a": 1})])
def test_parse(text, value):
    assert parse_arguments(text) == value


@pytest.mark.parametrize(
    "text, why", [("{x", "not valid JSON"), ("[1]", "JSON object"), ("null", "JSON object")]
)
def test_parse_errors(text, why):
    with pytest.raises(ArgumentsError, match=why):
        parse_arguments(text)
