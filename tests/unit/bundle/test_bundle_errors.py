"""Every user mistake becomes a ConfigError naming code, file, line and YAML path."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from goondan.bundle import BundleInvalid, ConfigError, load_bundle
from tests.unit.bundle.bundle_testkit import MINIMAL, edit, line_of, write_bundle

Errors = Callable[[Path], list[ConfigError]]


def only(errors: list[ConfigError], code: str, path: str | None = None) -> ConfigError:
    """The one error with `code` (and `path`, if given)."""
    hits = [e for e in errors if e.code == code and (path is None or e.path == path)]
    assert len(hits) == 1, f"expected one {code} at {path}, got:\n" + "\n".join(
        e.render() for e in errors
    )
    return hits[0]


def same_file(shown: str | None, expected: Path) -> bool:
    return shown is not None and Path(shown).resolve() == expected.resolve()


# -- loader -------------------------------------------------------------------------------------


def test_missing_directory(errors_of: Errors, tmp_path: Path) -> None:
    err = only(errors_of(tmp_path / "nope"), "FILE_NOT_FOUND")
    assert "no such file or directory" in err.message
    assert err.file == str(tmp_path / "nope") and err.suggestion


def test_directory_without_goondan_yaml(errors_of: Errors, tmp_path: Path) -> None:
    (tmp_path / "agents.yaml").write_text("kind: Agent\n")
    err = only(errors_of(tmp_path), "FILE_NOT_FOUND")
    assert "has no goondan.yaml" in err.message


def test_yaml_syntax_error_names_the_line(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("  model: scripted-v1\n", "  model: scripted-v1\n   extra: bad\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_PARSE_ERROR")
    assert same_file(err.file, tmp_path / "goondan.yaml")
    assert err.line == line_of(text, "extra: bad")
    assert "YAML syntax error" in err.message


def test_duplicate_yaml_key(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("  model: scripted-v1\n", "  model: scripted-v1\n  model: other\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_PARSE_ERROR")
    assert err.line == line_of(text, "model: other")
    assert "duplicate key 'model'" in err.message


def test_alias_bomb_is_rejected(errors_of: Errors, tmp_path: Path) -> None:
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in "bcdefgh":
        prev = chr(ord(level) - 1)
        bomb.append(f"{level}: &{level} [" + ", ".join(f"*{prev}" for _ in range(10)) + "]")
    bomb_text = "note: bomb\n" + "\n".join(bomb) + "\n"
    write_bundle(tmp_path, extra={"models.yaml": bomb_text})
    err = only(errors_of(tmp_path), "E_CONFIG_PARSE_ERROR")
    assert same_file(err.file, tmp_path / "models.yaml")
    assert "aliases expand" in err.message and err.line == 1


def test_recursive_alias_is_rejected(errors_of: Errors, tmp_path: Path) -> None:
    write_bundle(tmp_path, extra={"models.yaml": "loop: &a [*a]\n"})
    err = only(errors_of(tmp_path), "E_CONFIG_PARSE_ERROR")
    assert "recursive" in err.message


def test_file_too_large(errors_of: Errors, tmp_path: Path) -> None:
    write_bundle(tmp_path, extra={"tools.yaml": "# padding\n" * 120_000})
    err = only(errors_of(tmp_path), "E_CONFIG_FILE_TOO_LARGE")
    assert same_file(err.file, tmp_path / "tools.yaml")
    assert "1 MB" in err.message


def test_too_many_documents(errors_of: Errors, tmp_path: Path) -> None:
    write_bundle(tmp_path, extra={"models.yaml": "note: x\n---\n" * 101})
    err = only(errors_of(tmp_path), "E_CONFIG_TOO_MANY_DOCUMENTS")
    assert same_file(err.file, tmp_path / "models.yaml")
    assert err.line == 201  # where the 101st document starts


def test_non_utf8_and_non_mapping_documents(errors_of: Errors, tmp_path: Path) -> None:
    write_bundle(
        tmp_path, MINIMAL + "---\n- just\n- a list\n", extra={"agents.yaml": "", "tools.yaml": "x"}
    )
    (tmp_path / "agents.yaml").write_bytes(b"kind: \xff\xfe\n")
    errors = errors_of(tmp_path)
    assert only(errors, "E_CONFIG_PARSE_ERROR").message.startswith("file is not UTF-8")
    listed = [e for e in errors if e.code == "E_CONFIG_SCHEMA_INVALID"]
    assert [e.message for e in listed] == [
        "a resource document must be a mapping, got a list",
        "a resource document must be a mapping, got a string",
    ]


# -- envelope -----------------------------------------------------------------------------------


def test_unsupported_api_version(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("apiVersion: goondan.ai/v1\nkind: Model", "apiVersion: goondan.ai/v2\nkind: Model")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_UNSUPPORTED_API_VERSION")
    assert err.path == "Model/fast.apiVersion"
    assert err.line == line_of(text, "goondan.ai/v2")
    assert "expected goondan.ai/v1" in err.message


def test_unknown_kind_suggests_the_closest(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("kind: Connector\n", "kind: Conector\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_UNKNOWN_KIND")
    assert (err.path, err.line) == ("Conector/cli.kind", line_of(text, "kind: Conector"))
    assert err.suggestion == "did you mean 'Connector'?"


def test_invalid_name(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("  name: reviewer\n", "  name: Bad Name!\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_INVALID_NAME")
    assert err.path == "Agent/Bad Name!.metadata.name"
    assert err.line == line_of(text, "name: Bad Name!")
    assert same_file(err.file, tmp_path / "goondan.yaml")


def test_kind_missing_on_a_resource_like_document(errors_of: Errors, tmp_path: Path) -> None:
    text = MINIMAL + "---\napiVersion: goondan.ai/v1\nmetadata:\n  name: x\nspec: {}\n"
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_SCHEMA_INVALID")
    assert "'kind' is missing" in err.message and err.path == "document 9.kind"


def test_duplicate_name_names_both_places(errors_of: Errors, tmp_path: Path) -> None:
    dup = (
        "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: coder\nspec:\n"
        "  modelConfig: {modelRef: Model/fast}\n"
    )
    write_bundle(tmp_path, extra={"agents.yaml": dup})
    err = only(errors_of(tmp_path), "E_CONFIG_DUPLICATE_NAME")
    assert same_file(err.file, tmp_path / "agents.yaml")
    assert (err.line, err.path) == (4, "Agent/coder.metadata.name")
    first = line_of(MINIMAL, "name: coder") - 3
    assert err.message.endswith(f"goondan.yaml:{first}")


def test_same_name_in_another_package_is_not_a_duplicate(base_dir: Path, tmp_path: Path) -> None:
    local_agents = edit("  name: calc\n", "  name: agents\n")  # a local Tool named like base's
    local_agents = edit("    - ref: Tool/calc\n", "    - ref: Tool/agents\n", local_agents)
    local_agents = edit(
        '    - ref: {kind: Tool, name: agents, package: "@goondan/base"}\n', "", local_agents
    )
    write_bundle(tmp_path, local_agents)
    bundle = load_bundle(tmp_path, base_dir=base_dir)
    coder = bundle.local("Agent", "coder")
    assert coder is not None
    assert [(t.package, t.name) for t in bundle.agent_tools(coder)] == [("__local__", "agents")]


# -- references ---------------------------------------------------------------------------------


def test_malformed_ref(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("    - ref: Tool/calc\n", "    - ref: Tool/calc/v2\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_INVALID_REF")
    assert (err.path, err.line) == ("Agent/coder.spec.tools[0].ref", line_of(text, "calc/v2"))
    assert "exactly one '/'" in err.message


def test_ref_of_the_wrong_kind(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("    modelRef: Model/fast\n    params", "    modelRef: Tool/calc\n    params")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_INVALID_REF")
    assert err.path == "Agent/coder.spec.modelConfig.modelRef"
    assert err.line == line_of(text, "modelRef: Tool/calc")
    assert err.message == 'must reference a Model, not a Tool ("Tool/calc")'


def test_secret_ref_must_name_a_secret(errors_of: Errors, tmp_path: Path) -> None:
    text = edit(
        "  swarmRef: Swarm/default\n",
        "  swarmRef: Swarm/default\n  secrets:\n"
        "    T: {valueFrom: {secretRef: {ref: Token/x, key: k}}}\n",
    )
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_INVALID_REF")
    assert err.path == "Connection/cli-to-default.spec.secrets.T.valueFrom.secretRef.ref"
    assert (err.line, err.suggestion) == (line_of(text, "Token/x"), 'write ref: "Secret/<name>"')


def test_ref_not_found_suggests_the_base_package_form(errors_of: Errors, tmp_path: Path) -> None:
    text = edit(
        '    - ref: {kind: Tool, name: agents, package: "@goondan/base"}\n',
        "    - ref: Tool/agents\n",
    )
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_REF_NOT_FOUND")
    assert (err.path, err.line) == ("Agent/coder.spec.tools[1].ref", line_of(text, "Tool/agents"))
    assert err.suggestion == 'did you mean {kind: Tool, name: agents, package: "@goondan/base"}?'


def test_ref_not_found_suggests_a_close_name(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("  entryAgent: Agent/coder\n", "  entryAgent: Agent/codr\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_REF_NOT_FOUND")
    assert (err.path, err.line) == ("Swarm/default.spec.entryAgent", line_of(text, "Agent/codr"))
    assert err.message == "Agent/codr is not declared in this bundle"
    assert err.suggestion == 'did you mean "Agent/coder"?'


def test_ref_to_an_unknown_package(errors_of: Errors, tmp_path: Path) -> None:
    text = edit('package: "@goondan/base"}', 'package: "@acme/tools"}')
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_REF_NOT_FOUND")
    assert err.message == "Tool/agents is not declared in package @acme/tools"
    assert err.suggestion is not None and "not available" in err.suggestion


# -- schema -------------------------------------------------------------------------------------

_LOCAL_AGENTS_TOOL = """---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: agents
spec:
  entry: ./tools/calc.py
  exports: [{name: x, description: x, parameters: {type: object}}]
"""
_LONER = """---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: loner
spec:
  modelConfig: {modelRef: Model/fast}
"""

# (id, old snippet, new snippet, appended text, error path, where the line is, message fragment);
# "where" is a text on the expected line, or (text, occurrence, line offset).
Needle = str | tuple[str, int, int]
SCHEMA_CASES = [
    (
        "unknown-field",
        "  prompt:\n",
        "  promt:\n",
        "",
        "Agent/coder.spec.promt",
        "promt:",
        "unknown field 'promt'",
    ),
    (
        "unknown-top-level",
        "kind: Model\n",
        "kind: Model\nstatus: {}\n",
        "",
        "Model/fast.status",
        "status:",
        "unknown top-level field",
    ),
    (
        "missing-required",
        "  model: scripted-v1\n",
        "",
        "",
        "Model/fast.spec.model",
        ("provider: scripted", 1, -1),  # points at the parent `spec:`
        "required field 'model' is missing",
    ),
    (
        "wrong-type",
        "    params: {temperature: 0.2, maxTokens: 500}",
        "    params: [1]",
        "",
        "Agent/coder.spec.modelConfig.params",
        "params: [1]",
        "must be a mapping, got a list",
    ),
    (
        "system-and-systemRef",
        "    system: You write code.\n",
        "    system: You write code.\n    systemRef: ./p.md\n",
        "",
        "Agent/coder.spec.prompt",
        "  prompt:",
        "mutually exclusive",
    ),
    (
        "value-and-valueFrom",
        "  swarmRef: Swarm/default\n",
        "  swarmRef: Swarm/default\n  config:\n    A: {value: x, valueFrom: {env: A}}\n",
        "",
        "Connection/cli-to-default.spec.config.A",
        "A: {value",
        "mutually exclusive",
    ),
    (
        "entryAgent-not-in-agents",
        "    - ref: Agent/coder\n    - ref: Agent/reviewer\n",
        "    - ref: Agent/reviewer\n",
        "",
        "Swarm/default.spec.entryAgent",
        "entryAgent:",
        "is not one of the swarm's agents",
    ),
    (
        "swarm-without-agents",
        "  agents:\n    - ref: Agent/coder\n    - ref: Agent/reviewer\n",
        "  agents: []\n",
        "",
        "Swarm/default.spec.agents",
        "agents: []",
        "at least 1 item",
    ),
    (
        "duplicate-export",
        "        required: [a, b]\n",
        "        required: [a, b]\n    - name: add\n      description: again\n"
        "      parameters: {type: object}\n",
        "",
        "Tool/calc.spec.exports[1].name",
        ("- name: add", 2, 0),
        "declared twice",
    ),
    (
        "export-double-underscore",
        "    - name: add\n",
        "    - name: do__add\n",
        "",
        "Tool/calc.spec.exports[0].name",
        "do__add",
        "must not contain '__'",
    ),
    (
        "llm-name-too-long",
        "    - name: add\n",
        "    - name: " + "a" * 60 + "\n",
        "",
        "Tool/calc.spec.exports[0].name",
        "aaaa",
        "OpenAI and Anthropic reject",
    ),
    (
        "parameters-not-object",
        "        type: object\n",
        "        type: array\n",
        "",
        "Tool/calc.spec.exports[0].parameters.type",
        "type: array",
        "'type: object'",
    ),
    (
        "parameters-bad-schema",
        "          a: {type: number}",
        "          a: {type: number, minimum: lots}",
        "",
        "Tool/calc.spec.exports[0].parameters",
        "parameters:",
        "not a valid JSON Schema: minimum must be a number",
    ),
    (
        "parameters-unknown-type",
        "          a: {type: number}",
        "          a: {type: numbr}",
        "",
        "Tool/calc.spec.exports[0].parameters.properties.a.type",
        "a: {type: numbr}",
        "unknown JSON Schema type 'numbr'",
    ),
    (
        "errorMessageLimit",
        "  entry: ./tools/calc.py\n",
        "  entry: ./tools/calc.py\n  errorMessageLimit: 0\n",
        "",
        "Tool/calc.spec.errorMessageLimit",
        "errorMessageLimit",
        "integer >= 1",
    ),
    (
        "maxStepsPerTurn",
        "    - ref: Agent/reviewer\n",
        "    - ref: Agent/reviewer\n  policy: {maxStepsPerTurn: -3}\n",
        "",
        "Swarm/default.spec.policy.maxStepsPerTurn",
        "maxStepsPerTurn",
        "integer >= 1",
    ),
    (
        "temperature",
        "temperature: 0.2",
        "temperature: 2.5",
        "",
        "Agent/coder.spec.modelConfig.params.temperature",
        "temperature",
        "between 0 and 2",
    ),
    (
        "maxTokens",
        "maxTokens: 500",
        "maxTokens: 0",
        "",
        "Agent/coder.spec.modelConfig.params.maxTokens",
        "maxTokens",
        "integer >= 1",
    ),
    (
        "provider",
        "  provider: scripted\n",
        "  provider: bedrock\n",
        "",
        "Model/fast.spec.provider",
        "bedrock",
        "supported: scripted, openai, anthropic, google",
    ),
    (
        "instanceKey-xor",
        "instanceKey: cli}",
        "instanceKey: cli, instanceKeyProperty: user}",
        "",
        "Connection/cli-to-default.spec.ingress.rules[0].route",
        "route:",
        "mutually exclusive",
    ),
    (
        "route-agent-not-in-swarm",
        "{agentRef: Agent/reviewer,",
        "{agentRef: Agent/loner,",
        _LONER,
        "Connection/cli-to-default.spec.ingress.rules[0].route.agentRef",
        "route:",
        "Agent/loner is not an agent of Swarm/default",
    ),
    (
        "event-not-emitted",
        "{event: stdin_message}",
        "{event: stdin_mesage}",
        "",
        "Connection/cli-to-default.spec.ingress.rules[0].match.event",
        "match:",
        "emits no event 'stdin_mesage'",
    ),
    (
        "entry-absolute",
        "  entry: ./tools/calc.py\n",
        "  entry: /etc/calc.py\n",
        "",
        "Tool/calc.spec.entry",
        "entry: /etc",
        "relative to the bundle root",
    ),
    (
        "entry-escapes-root",
        "  entry: ./tools/calc.py\n",
        "  entry: ./tools/../../calc.py\n",
        "",
        "Tool/calc.spec.entry",
        "entry: ./tools/..",
        "outside the bundle root",
    ),
    (
        "entry-not-python",
        "  entry: ./connectors/cli.py\n",
        "  entry: ./connectors/index.ts\n",
        "",
        "Connector/cli.spec.entry",
        "index.ts",
        "must be a Python file",
    ),
    (
        "two-tools-same-name",
        "    - ref: Tool/calc\n",
        "    - ref: Tool/calc\n    - ref: Tool/agents\n",
        _LOCAL_AGENTS_TOOL,
        "Agent/coder.spec.tools[2]",
        "- ref: {kind: Tool",
        "duplicate tool names",
    ),
    (
        "tool-listed-twice",
        "    - ref: Tool/calc\n",
        "    - ref: Tool/calc\n    - Tool/calc\n",
        "",
        "Agent/coder.spec.tools[1]",
        "- Tool/calc",
        "listed twice",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "appended", "path", "needle", "fragment"),
    [case[1:] for case in SCHEMA_CASES],
    ids=[case[0] for case in SCHEMA_CASES],
)
def test_schema_invalid(
    errors_of: Errors,
    tmp_path: Path,
    old: str,
    new: str,
    appended: str,
    path: str,
    needle: Needle,
    fragment: str,
) -> None:
    text = edit(old, new) + appended
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_SCHEMA_INVALID", path)
    assert fragment in err.message, err.render()
    what, occurrence, offset = (needle, 1, 0) if isinstance(needle, str) else needle
    assert err.line == line_of(text, what, occurrence) + offset, err.render()
    assert same_file(err.file, tmp_path / "goondan.yaml")
    assert err.suggestion or "must be" in err.message  # says what to do, or what is expected


def test_unknown_field_suggests_the_right_one(errors_of: Errors, tmp_path: Path) -> None:
    write_bundle(tmp_path, edit("  prompt:\n", "  promt:\n"))
    err = only(errors_of(tmp_path), "E_CONFIG_SCHEMA_INVALID")
    assert err.suggestion == "did you mean 'prompt'?"


def test_unset_api_key_env_is_not_a_load_error(
    load: Callable[[Path], object], tmp_path: Path
) -> None:
    text = edit(
        "  model: scripted-v1\n",
        "  model: scripted-v1\n  apiKey: {valueFrom: {env: GOONDAN_TEST_SURELY_UNSET}}\n",
    )
    write_bundle(tmp_path, text)
    load(tmp_path)


# -- files --------------------------------------------------------------------------------------


def test_entry_not_found(errors_of: Errors, tmp_path: Path) -> None:
    write_bundle(tmp_path)
    (tmp_path / "tools" / "calc.py").unlink()
    err = only(errors_of(tmp_path), "E_CONFIG_ENTRY_NOT_FOUND")
    assert (err.path, err.line) == ("Tool/calc.spec.entry", line_of(MINIMAL, "./tools/calc.py"))
    assert "does not exist" in err.message


def test_entry_not_found_in_the_base_package(base_dir: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(base_dir, base)
    (base / "agents.py").unlink()
    write_bundle(tmp_path / "bundle")
    with pytest.raises(BundleInvalid) as info:
        load_bundle(tmp_path / "bundle", base_dir=base)
    err = only(info.value.errors, "E_CONFIG_ENTRY_NOT_FOUND")
    assert err.path == "Tool/agents.spec.entry"
    assert same_file(err.file, base / "goondan.yaml")
    assert err.line == line_of((base / "goondan.yaml").read_text(), "entry: ./agents.py")


def test_system_ref_file_not_found(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("    system: You write code.\n", "    systemRef: ./prompts/coder.md\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_ENTRY_NOT_FOUND")
    assert (err.path, err.line) == ("Agent/coder.spec.prompt.systemRef", line_of(text, "systemRef"))
    assert "prompt file './prompts/coder.md' does not exist" in err.message


# -- packages -----------------------------------------------------------------------------------

_PACKAGE_DOC = (
    "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: demo\n"
    'spec:\n  version: "0.1.0"\n---\n'
)


def test_package_doc_must_come_first(errors_of: Errors, tmp_path: Path) -> None:
    text = edit(_PACKAGE_DOC, "") + "---\n" + _PACKAGE_DOC.removesuffix("---\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_PACKAGE_DOC_POSITION")
    assert (err.path, err.line) == ("Package/demo.kind", line_of(text, "kind: Package"))


def test_package_doc_only_in_goondan_yaml(errors_of: Errors, tmp_path: Path) -> None:
    write_bundle(tmp_path, extra={"agents.yaml": _PACKAGE_DOC.replace("demo", "other")})
    err = only(errors_of(tmp_path), "E_CONFIG_PACKAGE_DOC_POSITION")
    assert same_file(err.file, tmp_path / "agents.yaml") and err.line == 2


def test_package_doc_duplicated(errors_of: Errors, tmp_path: Path) -> None:
    text = MINIMAL + "---\n" + _PACKAGE_DOC.replace("demo", "again").removesuffix("---\n")
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_PACKAGE_DOC_DUPLICATED")
    assert (err.path, err.line) == ("Package/again.kind", line_of(text, "kind: Package", 2))


def test_dependency_that_is_not_installed(errors_of: Errors, tmp_path: Path) -> None:
    text = edit(
        '  version: "0.1.0"\n',
        '  version: "0.1.0"\n  dependencies:\n    - {name: "@acme/x", version: "^1"}\n',
    )
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_PACKAGE_NOT_INSTALLED")
    assert (err.path, err.line) == (
        "Package/demo.spec.dependencies[0].name",
        line_of(text, "@acme/x"),
    )


# -- all at once --------------------------------------------------------------------------------


def test_every_problem_is_reported_in_file_and_line_order(
    errors_of: Errors, tmp_path: Path
) -> None:
    text = edit("  provider: scripted\n", "  provider: bedrock\n")
    text = edit(
        "    modelRef: Model/fast\n    params", "    modelRef: Model/slow\n    params", text
    )
    text = edit("    - name: add\n", "    - name: a__b\n", text)
    write_bundle(
        tmp_path,
        text,
        extra={"agents.yaml": "apiVersion: v0\nkind: Agent\nmetadata: {name: x}\nspec: {}\n"},
    )
    errors = errors_of(tmp_path)
    got = [(Path(e.file or "").name, e.code, e.path) for e in errors]
    assert got == [
        ("goondan.yaml", "E_CONFIG_SCHEMA_INVALID", "Model/fast.spec.provider"),
        ("goondan.yaml", "E_CONFIG_SCHEMA_INVALID", "Tool/calc.spec.exports[0].name"),
        ("goondan.yaml", "E_CONFIG_REF_NOT_FOUND", "Agent/coder.spec.modelConfig.modelRef"),
        ("agents.yaml", "E_CONFIG_UNSUPPORTED_API_VERSION", "Agent/x.apiVersion"),
        ("agents.yaml", "E_CONFIG_SCHEMA_INVALID", "Agent/x.spec.modelConfig"),
    ]
    lines = [e.line for e in errors]
    assert all(isinstance(n, int) for n in lines)
    assert lines[:3] == sorted(cast(list[int], lines[:3]))


def test_bundle_package_may_not_take_the_base_name(errors_of: Errors, tmp_path: Path) -> None:
    text = edit("  name: demo\n", '  name: "@goondan/base"\n')
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_INVALID_NAME")
    assert (err.path, err.line) == ("Package/@goondan/base.metadata.name", 4)


def test_files_under_the_working_directory_are_shown_relative(
    errors_of: Errors, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_bundle(tmp_path / "broken", edit("  provider: scripted\n", "  provider: x\n"))
    monkeypatch.chdir(tmp_path)
    err = only(errors_of(Path("broken")), "E_CONFIG_SCHEMA_INVALID")
    assert err.file == "broken/goondan.yaml"
    assert err.render().startswith("broken/goondan.yaml:13: Model/fast.spec.provider: ")


def test_api_keys_is_a_list_of_value_sources(tmp_path: Path) -> None:
    text = edit(
        "  model: scripted-v1\n",
        "  model: scripted-v1\n  apiKey: {value: a}\n"
        "  apiKeys:\n    - {value: b}\n    - {valueFrom: {env: GOONDAN_TEST_KEY_C}}\n",
    )
    write_bundle(tmp_path, text)
    [model] = load_bundle(tmp_path).of_kind("Model")
    assert model.spec.api_key is not None and model.spec.api_key.value == "a"
    assert [(s.value, s.env) for s in model.spec.api_keys] == [
        ("b", None),
        (None, "GOONDAN_TEST_KEY_C"),
    ]


def test_api_keys_entries_are_checked(errors_of: Errors, tmp_path: Path) -> None:
    text = edit(
        "  model: scripted-v1\n",
        "  model: scripted-v1\n  apiKeys:\n    - {value: b}\n    - {env: NOT_LIKE_THIS}\n",
    )
    write_bundle(tmp_path, text)
    err = only(errors_of(tmp_path), "E_CONFIG_SCHEMA_INVALID", "Model/fast.spec.apiKeys[1]")
    assert "exactly one of 'value' and 'valueFrom'" in err.message
