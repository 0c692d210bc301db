"""Finding a Connection, resolving its values, importing its entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from goondan import ConnectorConfigError
from goondan.connectors import import_main, load_connection
from tests.fakes.fake_orchestrator import write_bundle

CONNECTION = """
apiVersion: goondan.ai/v1
kind: Connector
metadata:
  name: mine
spec:
  entry: ./mine.py
  events:
    - name: e
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: c
spec:
  connectorRef: "Connector/mine"
  config:
    PORT: {value: "8080"}
    HOST: {valueFrom: {env: MY_HOST}}
  secrets:
    TOKEN: {valueFrom: {secretRef: {ref: "Secret/bot", key: "token"}}}
    OTHER: {valueFrom: {env: MY_OTHER}}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: base
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
"""


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return write_bundle(
        tmp_path / "b", CONNECTION, {"mine.py": "async def main(ctx):\n    return None\n"}
    )


def test_values_are_resolved_from_the_environment(bundle: Path) -> None:
    setup = load_connection(
        bundle, "c", {"MY_HOST": "0.0.0.0", "MY_OTHER": "", "GOONDAN_SECRET_BOT_TOKEN": "tok"}
    )
    assert setup.config == {"PORT": "8080", "HOST": "0.0.0.0"}
    assert setup.secrets == {"TOKEN": "tok", "OTHER": ""}
    assert setup.entry == (bundle / "mine.py").resolve()
    assert import_main(setup).__name__ == "main"
    base = load_connection(bundle, "base", {})
    assert base.connector == "webhook" and base.entry.name == "webhook.py"


def test_missing_values_are_named_with_where_they_come_from(bundle: Path) -> None:
    with pytest.raises(ConnectorConfigError) as error:
        load_connection(bundle, "c", {"MY_OTHER": "set-value"})
    message = str(error.value)
    assert "config.HOST (from environment variable MY_HOST)" in message
    assert "secrets.TOKEN" in message and "GOONDAN_SECRET_BOT_TOKEN" in message
    assert "set-value" not in message
    with pytest.raises(ConnectorConfigError, match="no Connection named 'x'.*c, base"):
        load_connection(bundle, "x", {})


def test_bad_entries_are_start_errors(bundle: Path) -> None:
    env = {"MY_HOST": "h", "MY_OTHER": "o", "SECRET_BOT": "t"}
    (bundle / "mine.py").write_text("def main(ctx):\n    pass\n")
    with pytest.raises(ConnectorConfigError, match="must define `async def main"):
        import_main(load_connection(bundle, "c", env))
    (bundle / "mine.py").write_text("import no_such_module_here\n")
    with pytest.raises(ConnectorConfigError, match="ModuleNotFoundError"):
        import_main(load_connection(bundle, "c", env))
    (bundle / "goondan.yaml").write_text("kind: [\n")
    with pytest.raises(ConnectorConfigError, match="no longer validates"):
        load_connection(bundle, "c", env)
