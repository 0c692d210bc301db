"""Installed Goondan packages for the tests: real dist-info directories on a sys.path entry,
found by importlib.metadata exactly as pip-installed ones are."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

Installer = Callable[..., Path]

TOOL_YAML = """\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: "{name}"
spec:
  version: "{version}"
{deps}---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: {tool}
spec:
  entry: ./tool.py
  exports:
    - name: run
      description: Run it.
      parameters: {{type: object}}
"""


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Installer:
    """install(name, version, ...) -> the package's module directory."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def run(
        name: str,
        version: str,
        *,
        dist: str | None = None,
        module: str | None = None,
        tool: str = "lookup",
        deps: str = "",
        goondan_yaml: str | None = None,
    ) -> Path:
        dist = dist or name.lstrip("@").replace("/", "-")
        module = module or dist.replace("-", "_")
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[goondan.packages]\n{name} = {module}\n")
        root = site / module
        root.mkdir()
        (root / "__init__.py").write_text("")
        (root / "tool.py").write_text("handlers = {'run': lambda ctx, args: {'ok': True}}\n")
        if deps:
            deps = "  dependencies:\n" + textwrap.indent(deps, "    ")
        text = goondan_yaml or TOOL_YAML.format(name=name, version=version, deps=deps, tool=tool)
        (root / "goondan.yaml").write_text(text)
        return root

    return run
