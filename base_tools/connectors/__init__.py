"""`@goondan/base` connectors: one module per Connector resource (see `../connectors.yaml`).

Each module's `async def main(ctx)` runs in the Connection's own connector process.
"""
