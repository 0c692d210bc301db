"""`feed`: one `feed_item` event per non-empty line of config FEED_PATH, then it ends."""

from __future__ import annotations

from pathlib import Path

from goondan import ConnectorContext


async def main(ctx: ConnectorContext) -> None:
    path = ctx.config.get("FEED_PATH")
    if not path:
        ctx.logger.error("feed.no_path", hint="set config FEED_PATH on the Connection")
        return
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if line.strip():
            await ctx.emit(
                "feed_item", text=line.strip(), instance_key=f"feed:{n}", properties={"line": n}
            )
