"""`query-normalizer`: trims and lower-cases the `query` argument of the search tool's calls."""

from __future__ import annotations

from typing import Any

from goondan import ExtensionApi, ExtensionConfigError, ToolCallMiddlewareContext, ToolResult


def register(api: ExtensionApi, config: dict[str, Any]) -> None:
    prefix = config.get("toolPrefix", "search__")
    if not isinstance(prefix, str) or not prefix:
        raise ExtensionConfigError("toolPrefix must be a non-empty string")

    async def normalize(ctx: ToolCallMiddlewareContext) -> ToolResult:
        query = ctx.args.get("query")
        if ctx.tool_name.startswith(prefix) and isinstance(query, str):
            ctx.args["query"] = " ".join(query.split()).lower()
        return await ctx.next()

    api.pipeline.register("toolCall", normalize)
