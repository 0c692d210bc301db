"""The web studio (`goondan run --studio HOST:PORT`): the swarm's graph, its requests' traces,
conversations and live events, served by the daemon. Imported only when it is enabled (it
needs aiohttp)."""
