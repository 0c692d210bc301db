"""`tool-search`: a meta-tool that narrows the next steps' catalog to what the model picks.

config (defaults): toolName "tool-search__search", maxResults 10, minQueryLength 1,
persistSelection true.

Registers `tool-search__search {query, limit?}`: a case-insensitive match of the query (the
whole text, or every word of it) against the names and descriptions of the tools offered in
the current step. When it finds tools, the following steps offer only those and the search
tool itself; `query: "*"` lists every tool and clears the selection. With persistSelection
the selection lasts across turns (in the extension's state), else until the turn ends.
"""

from __future__ import annotations

from typing import Any

from base_tools.extensions import _config
from goondan import (
    ErrorCode,
    ExtensionApi,
    StepMiddlewareContext,
    StepResult,
    ToolContext,
    ToolError,
    TurnMiddlewareContext,
    TurnResult,
)


def register(api: ExtensionApi, config: dict[str, Any]) -> None:
    tool_name = _config.string(config, "toolName", "tool-search__search")
    if "__" not in tool_name:
        tool_name = f"tool-search__{tool_name}"
    max_results = _config.integer(config, "maxResults", 10, minimum=1)
    min_query = _config.integer(config, "minQueryLength", 1, minimum=1)
    persist = _config.boolean(config, "persistSelection", True)

    def search(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        state = api.state.get() or {}
        catalog: list[dict[str, str]] = state.get("catalog", [])
        query = str(args["query"]).strip()
        limit = min(int(args.get("limit", max_results)), max_results)
        if query == "*":
            state.pop("selected", None)
            api.state.set(state)
            return {"query": query, "count": len(catalog), "tools": catalog, "selection": "all"}
        if len(query) < min_query:
            raise ToolError(
                f"The query must be at least {min_query} characters.",
                code=ErrorCode.E_TOOL_SEARCH_QUERY,
                suggestion='Search for a word from the task, or "*" for every tool.',
            )
        found = [tool for tool in catalog if _matches(query, tool)][:limit]
        if found:
            state["selected"] = [tool["name"] for tool in found]
            api.state.set(state)
        return {
            "query": query,
            "count": len(found),
            "tools": found,
            "selection": "narrowed" if found else "unchanged",
        }

    api.tools.register(
        {
            "name": tool_name,
            "description": "Search the available tools by name or description. The tools "
            'found are the ones offered from the next step on; "*" offers every tool again.',
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["query"],
                "properties": {
                    "query": {"type": "string", "description": "Words describing the tool."},
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": max_results,
                        "description": f"Most tools to return (default {max_results}).",
                    },
                },
            },
        },
        search,
    )

    async def narrow(ctx: StepMiddlewareContext) -> StepResult:
        state = api.state.get() or {}
        snapshot = [
            {"name": t.name, "description": t.description}
            for t in ctx.tool_catalog
            if t.name != tool_name
        ]
        if state.get("catalog") != snapshot:
            state["catalog"] = snapshot
            api.state.set(state)
        selected = state.get("selected")
        if isinstance(selected, list) and selected:
            keep = set(selected) | {tool_name}
            ctx.tool_catalog = [t for t in ctx.tool_catalog if t.name in keep]
        return await ctx.next()

    async def forget(ctx: TurnMiddlewareContext) -> TurnResult:
        try:
            return await ctx.next()
        finally:
            state = api.state.get() or {}
            if "selected" in state:
                del state["selected"]
                api.state.set(state)

    api.pipeline.register("step", narrow)
    if not persist:
        api.pipeline.register("turn", forget)


def _matches(query: str, tool: dict[str, str]) -> bool:
    text = f"{tool.get('name', '')} {tool.get('description', '')}".lower()
    query = query.lower()
    return query in text or all(word in text for word in query.split())
