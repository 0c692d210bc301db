"""Name rules: resource names, package names and the tool names an LLM sees."""

from __future__ import annotations

import re

# Resource names end up in file paths (state dirs), log fields and tool names: keep them plain.
# Upstream says SHOULD be [a-z][a-z0-9-]*, <= 63 chars; we accept case, digits, '.', '_' too.
RESOURCE_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
# npm-style, optionally scoped: `@goondan/base`, `my-swarm`.
PACKAGE_NAME = re.compile(r"^(?:@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]{0,213}$")
# OpenAI and Anthropic reject tool names outside this pattern.
LLM_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_SEPARATOR = "__"

RESOURCE_NAME_RULE = (
    "1-63 characters: letters, digits, '-', '_' or '.', starting and ending with a letter "
    "or digit (lowercase-with-hyphens recommended, e.g. 'code-reviewer')"
)
PACKAGE_NAME_RULE = "a lowercase npm-style name, optionally scoped: 'my-swarm' or '@scope/name'"


def llm_tool_name(tool: str, export: str) -> str:
    """What the LLM calls an export: `{tool}__{export}`."""
    return f"{tool}{TOOL_SEPARATOR}{export}"
