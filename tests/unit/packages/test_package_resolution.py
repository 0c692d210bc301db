"""A bundle's dependencies resolve against installed distributions (entry points)."""

from __future__ import annotations

from pathlib import Path

import pytest

from goondan.bundle import BundleInvalid, ConfigError, load_bundle
from goondan.bundle.model import ObjectRef
from goondan.bundle.packages import installed_packages
from tests.unit.packages.conftest import Installer

REPO = Path(__file__).resolve().parents[3]


def bundle(tmp_path: Path, deps: str, tools: str = "    - ref: Tool/lookup\n") -> Path:
    root = tmp_path / "bundle"
    root.mkdir(exist_ok=True)
    (root / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: demo\n"
        f"spec:\n  version: '0.1.0'\n  dependencies:\n{deps}"
        "---\napiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: m}\n"
        "spec: {provider: scripted, model: scripted-v1}\n"
        "---\napiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {name: a}\n"
        f"spec:\n  modelConfig: {{modelRef: Model/m}}\n  tools:\n{tools}"
        "---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: default}\n"
        "spec: {entryAgent: Agent/a, agents: [{ref: Agent/a}]}\n"
    )
    return root


def errors(path: Path) -> list[ConfigError]:
    with pytest.raises(BundleInvalid) as info:
        load_bundle(path)
    return info.value.errors


def test_base_is_found_through_goondans_entry_point() -> None:
    base = installed_packages()["@goondan/base"]
    assert base.distribution == "goondan" and base.module == "base_tools"
    assert base.root == (REPO / "base_tools").resolve()


def test_a_dependency_resolves_by_kind_and_name_and_by_package(
    install: Installer, tmp_path: Path
) -> None:
    root = install("@acme/search", "1.2.0")
    path = bundle(
        tmp_path,
        "    - {name: '@acme/search', version: '^1.2.0'}\n",
        "    - ref: Tool/lookup\n    - ref: {kind: Tool, name: bash, package: '@goondan/base'}\n",
    )
    loaded = load_bundle(path)
    tool = loaded.find(ObjectRef("Tool", "lookup"))
    assert tool is not None and tool.package == "@acme/search"
    assert tool.entry_path() == root / "tool.py"
    assert loaded.find(ObjectRef("Tool", "lookup", "@acme/search")) is tool
    assert loaded.package_roots["@acme/search"] == root


def test_a_version_outside_the_range_names_both(install: Installer, tmp_path: Path) -> None:
    install("@acme/search", "2.0.1")
    path = bundle(tmp_path, "    - name: '@acme/search'\n      version: '^1.2.0'\n")
    (err,) = [e for e in errors(path) if e.code == "E_CONFIG_PACKAGE_VERSION_MISMATCH"]
    assert "@acme/search 2.0.1 is installed (distribution acme-search)" in err.message
    assert "@acme/search@^1.2.0" in err.message
    assert err.line == 9 and err.path == "Package/demo.spec.dependencies[0].version"


def test_a_range_that_does_not_parse(install: Installer, tmp_path: Path) -> None:
    install("@acme/search", "1.2.0")
    path = bundle(tmp_path, "    - {name: '@acme/search', version: 'latest'}\n")
    (err,) = errors(path)
    assert "'latest' is not a valid version range" in err.message


def test_a_package_that_is_not_installed(tmp_path: Path) -> None:
    path = bundle(tmp_path, "    - {name: '@acme/none', version: '*'}\n", "    []\n")
    (err,) = errors(path)
    assert err.code == "E_CONFIG_PACKAGE_NOT_INSTALLED"
    assert "goondan package add @acme/none" in (err.suggestion or "")


def test_an_installed_package_that_is_not_a_dependency_is_not_loaded(
    install: Installer, tmp_path: Path
) -> None:
    install("@acme/search", "1.2.0")
    path = bundle(
        tmp_path, "    []\n", "    - ref: {kind: Tool, name: lookup, package: '@acme/search'}\n"
    )
    (err,) = errors(path)
    assert err.code == "E_CONFIG_REF_NOT_FOUND"
    assert "goondan package add @acme/search" in (err.suggestion or "")


def test_dependencies_of_dependencies_load_and_are_checked(
    install: Installer, tmp_path: Path
) -> None:
    install("@acme/core", "0.5.2", tool="core")
    install("@acme/search", "1.2.0", deps="- {name: '@acme/core', version: '^0.5.0'}\n")
    loaded = load_bundle(bundle(tmp_path, "    - {name: '@acme/search', version: '^1'}\n"))
    assert loaded.find(ObjectRef("Tool", "core"), "@acme/search") is not None
    assert loaded.find(ObjectRef("Tool", "core")) is None  # not the bundle's own dependency


def test_conflicting_ranges_are_each_reported(install: Installer, tmp_path: Path) -> None:
    install("@acme/core", "0.5.2", tool="core")
    install("@acme/search", "1.2.0", deps="- {name: '@acme/core', version: '^1.0.0'}\n")
    path = bundle(tmp_path, "    - {name: '@acme/search', version: '^1'}\n")
    (err,) = errors(path)
    assert err.code == "E_CONFIG_PACKAGE_VERSION_MISMATCH"
    assert "Package/@acme/search asks for @acme/core@^1.0.0" in err.message
    assert err.file is not None and err.file.endswith("goondan.yaml")


def test_a_package_named_otherwise_than_its_entry_point(install: Installer, tmp_path: Path) -> None:
    install("@acme/search", "1.2.0", goondan_yaml="kind: Package\nmetadata: {name: '@x/y'}\n")
    path = bundle(tmp_path, "    - {name: '@acme/search', version: '*'}\n", "    []\n")
    (err,) = [e for e in errors(path) if e.code == "E_CONFIG_INVALID_NAME"]
    assert "installed under the name @acme/search but its Package is named @x/y" in err.message


def test_the_bundle_cache_sees_a_package_change(install: Installer, tmp_path: Path) -> None:
    from goondan.bundle.cache import load_bundle_cached

    root = install("@acme/search", "1.2.0")
    path = bundle(tmp_path, "    - {name: '@acme/search', version: '^1.2.0'}\n")
    first = load_bundle_cached(path)
    assert load_bundle_cached(path) is first
    yaml_file = root / "goondan.yaml"
    yaml_file.write_text(yaml_file.read_text().replace("Run it.", "Run it now."))
    second = load_bundle_cached(path)
    assert second is not first
    tool = second.find(ObjectRef("Tool", "lookup"))
    assert tool is not None and tool.spec.exports[0].description == "Run it now."


def test_an_upstream_range_for_the_built_in_package_is_a_warning(tmp_path: Path) -> None:
    import io

    from goondan.cli.validate_cmd import run_validate

    path = bundle(
        tmp_path,
        "    - {name: '@goondan/base', version: '^1.0.0'}\n",
        "    - ref: Tool/bash\n",
    )
    load_bundle(path)  # runs: goondan has only the one @goondan/base
    out = io.StringIO()
    assert run_validate(str(path), "text", out, deep=False) == 0
    assert (
        "warning: goondan.yaml:1: Package/demo.spec.dependencies[0].version: @goondan/base is "
        "built into goondan at 0.1.0, outside the range ^1.0.0; the built-in one is used"
    ) in out.getvalue().replace(str(path) + "/", "")
