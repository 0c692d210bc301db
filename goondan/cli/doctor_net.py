"""`goondan doctor`: model endpoints (which one, reachable, and with `--online` whether the key
is accepted) and connector ports (free to bind)."""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

from agentproc.providers.endpoints import effective_endpoint
from goondan.bundle import Bundle, Resource
from goondan.bundle.loader import BASE_PACKAGE
from goondan.bundle.values import resolve_value
from goondan.cli.doctor_report import Check, fail, ok, warn

CONNECT_TIMEOUT_S = 3.0
ONLINE_TIMEOUT_S = 10.0
ANTHROPIC_VERSION = "2023-06-01"

# The built-in connectors that listen: default port and the config keys that set it.
LISTENING_CONNECTORS = {
    "webhook": (8080, ("PORT",)),
    "slack": (8787, ("SLACK_WEBHOOK_PORT", "PORT")),
    "discord": (8788, ("PORT",)),
    "github": (8789, ("PORT",)),
}


def check_endpoints(bundle: Bundle, environ: Mapping[str, str], *, online: bool) -> list[Check]:
    checks: list[Check] = []
    for model in bundle.of_kind("Model"):
        for label, provider, endpoint_field, key in _model_targets(model, environ):
            checks.append(_check_endpoint(label, provider, endpoint_field, key, environ, online))
    return checks


def _model_targets(
    model: Resource, environ: Mapping[str, str]
) -> list[tuple[str, str, str | None, str | None]]:
    """(label, provider, Model.spec-level endpoint, API key) of the model and its fallbacks,
    resolved as the agent resolves them (`agentproc.providers.make_provider`)."""
    spec = model.spec
    key = resolve_value(spec.api_key, environ) if spec.api_key else None
    targets = [(model.label, spec.provider, spec.endpoint, key)]
    fallbacks = spec.options.get("fallbacks")
    for index, item in enumerate(fallbacks if isinstance(fallbacks, list) else ()):
        if not isinstance(item, dict):
            continue
        provider = item.get("provider") or spec.provider
        same = provider == spec.provider
        endpoint = item.get("endpoint") or (spec.endpoint if same else None)
        if isinstance(item.get("apiKeyEnv"), str):
            fallback_key = environ.get(item["apiKeyEnv"])
        else:
            fallback_key = key if same and endpoint == spec.endpoint else None
        label = f"{model.label} fallbacks[{index}]"
        targets.append((label, str(provider), endpoint, fallback_key))
    return targets


def _check_endpoint(
    label: str,
    provider: str,
    endpoint_field: str | None,
    key: str | None,
    environ: Mapping[str, str],
    online: bool,
) -> Check:
    endpoint = effective_endpoint(provider, endpoint_field, environ)
    if endpoint.url is None:
        return ok("endpoint", f"{label}: provider {provider} needs no network")
    why = {"Model.spec.endpoint": "from Model.spec.endpoint", "default": "the public API"}
    reason = why.get(endpoint.source, f"from {endpoint.source}")
    label = f"{label} ({provider}) uses {endpoint.url} ({reason})"
    reached = _connect(endpoint.url)
    if reached is not None:
        fix = "start the server, or correct Model.spec.endpoint / the base-URL variable"
        return fail("endpoint", f"{label}: not reachable ({reached})", fix)
    if not online:
        return ok("endpoint", f"{label}: reachable")
    return _online(label, provider, endpoint.url, key)


def _connect(url: str) -> str | None:
    """None when a TCP connection to the URL's host opens, else why not."""
    parts = urlsplit(url)
    if not parts.hostname:
        return f"'{url}' has no host"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"'{url}' has a bad port"
    try:
        with socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S):
            return None
    except TimeoutError:
        return f"no answer from {parts.hostname}:{port} within {CONNECT_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"{parts.hostname}:{port}: {exc.strerror or exc}"


def _online(label: str, provider: str, url: str, key: str | None) -> Check:
    """One cheap authenticated call: list the models."""
    import httpx

    base = url.rstrip("/")
    if provider == "anthropic":
        target = base.removesuffix("/v1") + "/v1/models"
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if key:
            headers["x-api-key"] = key
    elif provider == "google":
        target = base.removesuffix("/v1beta") + "/v1beta/models"
        headers = {"x-goog-api-key": key} if key else {}
    else:
        target = base + "/models"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(target, headers=headers, timeout=ONLINE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return fail("endpoint", f"{label}: GET {target} failed: {type(exc).__name__}")
    status = response.status_code
    # Gemini answers a wrong key with 400 INVALID_ARGUMENT, "API key not valid".
    bad_key = provider == "google" and status == 400 and "API key" in response.text
    if status in (401, 403) or bad_key:
        fix = "check the API key the Model's apiKey names" if key else "set the Model's apiKey"
        return fail("endpoint", f"{label}: the API key was rejected (HTTP {status})", fix)
    if 200 <= status < 300:
        accepted = "the API key was accepted" if key else "no key needed"
        return ok("endpoint", f"{label}: {accepted} (GET {target})")
    return warn(
        "endpoint",
        f"{label}: GET {target} answered HTTP {status}; the key could not be checked",
    )


def check_ports(bundle: Bundle, environ: Mapping[str, str], *, daemon_running: bool) -> list[Check]:
    checks: list[Check] = []
    for connection in bundle.of_kind("Connection"):
        where = _listen_address(bundle, connection, environ)
        if where is None:
            continue
        host, port, origin = where
        label = f"{connection.label} listens on {host}:{port} ({origin})"
        problem = _bind(host, port)
        if problem is None:
            checks.append(ok("port", f"{label}: free"))
        elif problem == "in use" and daemon_running:
            checks.append(ok("port", f"{label}: in use, probably by the running daemon"))
        else:
            fix = "stop what listens there, or set the Connection's config PORT"
            checks.append(fail("port", f"{label}: {problem}", fix))
    return checks


def _listen_address(
    bundle: Bundle, connection: Resource, environ: Mapping[str, str]
) -> tuple[str, int, str] | None:
    connector = bundle.find(connection.spec.connector_ref, connection.package)
    if connector is None:
        return None
    config = connection.spec.config
    known = LISTENING_CONNECTORS.get(connector.name) if connector.package == BASE_PACKAGE else None
    keys = known[1] if known else ("PORT",)
    port: int | None = known[0] if known else None
    origin = "the connector's default"
    for key in keys:
        source = config.get(key)
        text = resolve_value(source, environ) if source is not None else None
        if text and text.strip():
            try:
                port = int(text)
            except ValueError:
                return None  # the connector reports a bad port itself
            origin = f"config {key}"
            break
    if port is None:
        return None
    host_source = config.get("HOST")
    host = (resolve_value(host_source, environ) if host_source else None) or "127.0.0.1"
    return host.strip(), port, origin


def _bind(host: str, port: int) -> str | None:
    """None when `host:port` can be bound now (as the connector's server would), else why."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"cannot resolve {host}: {exc.strerror or exc}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        # Like the connector's server (aiohttp/asyncio set SO_REUSEADDR): a socket left in
        # TIME_WAIT by a stopped daemon does not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "in use"
            return exc.strerror or str(exc)
    return None
