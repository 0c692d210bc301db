"""A valid bundle loads into typed resources, and Bundle's lookups work on it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from goondan.bundle import (
    LOCAL_SCOPE,
    AgentSpec,
    Bundle,
    ConfigError,
    ConnectionSpec,
    ConnectorSpec,
    ExtensionSpec,
    ModelSpec,
    ObjectRef,
    PackageSpec,
    SecretRef,
    SwarmSpec,
    ToolSpec,
    ValueSource,
    load_bundle,
)
from goondan.bundle.discover import base_package_dir
from tests.unit.bundle.bundle_testkit import FIXTURES, MINIMAL, REPO, edit, line_of, write_bundle

MULTI = FIXTURES / "multi"
Loader = Callable[[Path], Bundle]


@pytest.fixture
def multi(load: Loader) -> Bundle:
    return load(MULTI)


def test_split_files_are_picked_up(multi: Bundle) -> None:
    files = {r.label: r.source.file.name for r in multi.resources if r.package == LOCAL_SCOPE}
    assert files["Agent/coder"] == "agents.yaml"
    assert files["Tool/calc"] == "tools.yaml"
    assert files["Swarm/ops"] == "swarms.yml"  # nested directory, .yml extension
    assert files["Model/fast"] == "goondan.yaml"
    assert multi.root == MULTI.resolve()
    assert multi.package_name == "@tests/multi"


def test_swarm_views(multi: Bundle) -> None:
    assert sorted(multi.swarm_names()) == ["default", "ops"]
    swarm = multi.select_swarm(None)  # two swarms: the one named "default" wins
    assert swarm.name == "default"
    assert list(multi.swarm_agents(swarm)) == ["coder", "reviewer", "researcher"]
    assert multi.entry_agent(swarm) == "coder"
    ops = multi.select_swarm("ops")
    assert multi.entry_agent(ops) == "researcher"
    assert list(multi.swarm_agents(ops)) == ["researcher"]  # bare-string agent item
    with pytest.raises(LookupError, match="no Swarm named 'nope'"):
        multi.select_swarm("nope")


def test_swarm_spec_is_typed(multi: Bundle) -> None:
    spec = multi.select_swarm("default").spec
    assert isinstance(spec, SwarmSpec)
    assert spec.entry_agent == ObjectRef(kind="Agent", name="coder")
    assert spec.instance_key == "team"
    assert spec.policy.max_steps_per_turn == 12
    assert spec.policy.lifecycle.ttl_seconds == 3600
    assert spec.policy.lifecycle.gc_grace_seconds is None
    assert spec.policy.shutdown.grace_period_seconds == 5


def test_agent_tools_include_base_package_tool(multi: Bundle, base_dir: Path) -> None:
    coder = multi.local("Agent", "coder")
    assert coder is not None
    tools = multi.agent_tools(coder)
    assert [(t.package, t.name) for t in tools] == [
        (LOCAL_SCOPE, "calc"),
        ("@goondan/base", "agents"),
    ]
    base_tool = tools[1]
    assert isinstance(base_tool.spec, ToolSpec)
    assert base_tool.source.root == base_dir.resolve()
    assert base_tool.entry_path() == (base_dir / "agents.py").resolve()
    assert [e.name for e in base_tool.spec.exports] == [
        "request",
        "send",
        "spawn",
        "list",
        "catalog",
    ]
    assert base_tool.spec.error_message_limit == 1500
    calc = tools[0]
    assert calc.entry_path() == (MULTI / "tools" / "calc.py").resolve()
    assert calc.spec.error_message_limit == 500
    assert calc.spec.exports[0].parameters["required"] == ["a", "b"]


def test_agent_spec_fields_are_snake_case(multi: Bundle) -> None:
    coder = multi.local("Agent", "coder")
    assert coder is not None
    spec = coder.spec
    assert isinstance(spec, AgentSpec)
    assert spec.model_config.model_ref == ObjectRef(kind="Model", name="fast")
    # params stay as written, camelCase keys included, unknown extras kept for the provider
    assert spec.model_config.params == {
        "temperature": 0.3,
        "maxTokens": 800,
        "topP": 0.9,
        "reasoningEffort": "low",
    }
    assert spec.prompt is not None and spec.prompt.system_ref == "./prompts/coder.md"
    assert spec.extensions[0].ref == ObjectRef(kind="Extension", name="logging")
    assert spec.extensions[0].config == {"level": "debug"}
    assert spec.required_tools == ("calc__add",)


def test_system_prompt_inline_and_from_file(multi: Bundle) -> None:
    coder, reviewer, researcher = (
        multi.local("Agent", n) for n in ("coder", "reviewer", "researcher")
    )
    assert coder is not None and reviewer is not None and researcher is not None
    assert multi.system_prompt(coder) == "You are a careful coder.\n"
    assert multi.system_prompt(reviewer) == "You review code."
    assert multi.system_prompt(researcher) is None


def test_model_lookup_and_local_package_scope(multi: Bundle) -> None:
    coder, reviewer = multi.local("Agent", "coder"), multi.local("Agent", "reviewer")
    assert coder is not None and reviewer is not None
    fast = multi.model_spec(coder)
    assert isinstance(fast, ModelSpec)
    assert (fast.provider, fast.model, fast.endpoint) == (
        "openai",
        "gpt-4o-mini",
        "http://localhost:11434/v1",
    )
    # An unset apiKey variable is not a load error: the model checks it when first called.
    assert fast.api_key == ValueSource(env="GOONDAN_TEST_UNSET_KEY")
    assert fast.capabilities.streaming is True and fast.capabilities.tool_calling is True
    # reviewer names the bundle's own package in its modelRef: that means local scope
    assert multi.agent_model(reviewer).name == "offline"
    assert multi.model_spec(reviewer).options == {"default": "hello"}


def test_connection_extension_connector_package(multi: Bundle) -> None:
    conn = multi.local("Connection", "cli-to-default")
    assert conn is not None and isinstance(conn.spec, ConnectionSpec)
    spec = conn.spec
    assert spec.connector_ref == ObjectRef(kind="Connector", name="cli")
    assert spec.swarm_ref == ObjectRef(kind="Swarm", name="default")
    assert spec.config == {"GREETING": ValueSource(value="hi")}
    assert spec.secrets == {
        "TOKEN": ValueSource(secret_ref=SecretRef(ref="Secret/cli-auth", key="token"))
    }
    first, second = spec.ingress_rules
    assert first.match.event == "stdin_message" and first.match.properties == {"user": "alice"}
    assert first.route.agent_ref == ObjectRef(kind="Agent", name="reviewer")
    assert (first.route.instance_key_property, first.route.instance_key_prefix) == ("user", "cli:")
    assert second.match.event is None and second.route.instance_key == "cli"

    ext = multi.local("Extension", "logging")
    assert ext is not None and isinstance(ext.spec, ExtensionSpec)
    assert ext.spec.config == {"level": "info"}
    connector = multi.local("Connector", "cli")
    assert connector is not None and isinstance(connector.spec, ConnectorSpec)
    assert connector.spec.events[0].name == "stdin_message"
    package = multi.local("Package", "@tests/multi")
    assert package is not None and isinstance(package.spec, PackageSpec)
    assert package.spec.dependencies[0].name == "@goondan/base"
    model = multi.local("Model", "fast")
    assert model is not None and model.metadata.labels == {"tier": "cheap"}
    # Source.line is the document's first key (1-based): the apiVersion above "name: fast"
    text = (MULTI / "goondan.yaml").read_text()
    assert model.source.line == line_of(text, "name: fast") - 3
    assert model.source.doc_index == 1


def test_path_may_be_the_goondan_yaml_file(load: Loader, tmp_path: Path) -> None:
    write_bundle(tmp_path)
    bundle = load(tmp_path / "goondan.yaml")
    assert bundle.root == tmp_path.resolve()
    assert bundle.select_swarm(None).name == "default"
    assert bundle.package_name == "demo"


def test_scan_skips_build_dependency_and_hidden_dirs(load: Loader, tmp_path: Path) -> None:
    garbage = "this: is: [not valid yaml\n"
    write_bundle(
        tmp_path,
        extra={
            "node_modules/x/agents.yaml": garbage,
            "dist/tools.yaml": garbage,
            ".git/tools.yaml": garbage,
            ".venv/lib/swarm.yaml": garbage,
            ".hidden/models.yaml": garbage,
            "notes.yaml": garbage,  # not a resource file name
            "README.md": garbage,
        },
    )
    assert load(tmp_path).local("Swarm", "default") is not None


def test_documents_without_kind_are_ignored(load: Loader, tmp_path: Path) -> None:
    write_bundle(tmp_path, MINIMAL + "---\nnote: a document without kind is ignored\n---\n")
    assert len([r for r in load(tmp_path).resources if r.package == LOCAL_SCOPE]) == 8


def test_package_doc_is_optional(load: Loader, tmp_path: Path) -> None:
    text = edit(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: demo\n"
        'spec:\n  version: "0.1.0"\n---\n',
        "",
    )
    write_bundle(tmp_path, text)
    assert load(tmp_path).package_name is None


def test_bare_string_refs_and_yaml_merge_keys(load: Loader, tmp_path: Path) -> None:
    text = edit("  tools:\n    - ref: Tool/calc\n", "  tools:\n    - Tool/calc\n")
    text = edit(
        "kind: Model\nmetadata:\n  name: fast\nspec:\n  provider: scripted\n",
        "kind: Model\nmetadata:\n  name: fast\nspec:\n  <<: &common {provider: scripted}\n",
        text,
    )
    write_bundle(tmp_path, text)
    bundle = load(tmp_path)
    coder = bundle.local("Agent", "coder")
    assert coder is not None
    assert [t.name for t in bundle.agent_tools(coder)] == ["calc", "agents"]
    assert bundle.model_spec(coder).provider == "scripted"


def test_default_base_package_is_base_tools() -> None:
    base = base_package_dir()
    assert base == (REPO / "base_tools").resolve()
    assert (base / "goondan.yaml").is_file()


def test_quickstart_style_bundle_loads_with_the_shipped_base(tmp_path: Path) -> None:
    # No base_dir override: this is what `goondan run` sees, real base_tools/ included.
    shutil.copytree(MULTI, tmp_path / "multi")
    bundle = load_bundle(tmp_path / "multi")
    agents_tool = bundle.find(ObjectRef(kind="Tool", name="agents", package="@goondan/base"))
    assert agents_tool is not None
    assert agents_tool.source.root == (REPO / "base_tools").resolve()


def test_short_refs_reach_a_declared_dependency(tmp_path: Path, load: Loader) -> None:
    text = edit(
        'version: "0.1.0"\n',
        'version: "0.1.0"\n  dependencies:\n    - {name: "@goondan/base", version: "*"}\n',
    )
    text = edit('{kind: Tool, name: agents, package: "@goondan/base"}', "Tool/agents", text)
    bundle = load(write_bundle(tmp_path, text))
    coder = bundle.local("Agent", "coder")
    assert coder is not None
    tools = bundle.agent_tools(coder)
    assert [(t.package, t.name) for t in tools] == [
        (LOCAL_SCOPE, "calc"),
        ("@goondan/base", "agents"),
    ]


def test_short_refs_do_not_reach_an_undeclared_package(
    tmp_path: Path, errors_of: Callable[[Path], list[ConfigError]]
) -> None:
    text = edit('{kind: Tool, name: agents, package: "@goondan/base"}', "Tool/agents")
    [error] = errors_of(write_bundle(tmp_path, text))
    assert error.code == "E_CONFIG_REF_NOT_FOUND"
