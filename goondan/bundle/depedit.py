"""Edit `Package.spec.dependencies` in goondan.yaml's text, keeping the rest of the file.

A YAML library would drop comments and reorder keys on a round trip, so this edits the text
at the positions the YAML composer reports: one item's version, one item added after the last,
one item's lines removed. The result is parsed again and compared with what was asked for;
anything else is an `EditError`, and the file is left alone.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from goondan.bundle.codes import API_VERSION


class EditError(Exception):
    pass


Dependencies = list[tuple[str, str]]


def read_dependencies(text: str) -> Dependencies:
    """(name, range) of each dependency of the Package document (the first document)."""
    try:
        first = next(iter(yaml.safe_load_all(text)), None)
    except yaml.YAMLError as exc:
        raise EditError(f"goondan.yaml is not valid YAML: {exc}") from exc
    if not isinstance(first, dict) or first.get("kind") != "Package":
        return []
    spec = first.get("spec")
    deps = spec.get("dependencies") if isinstance(spec, dict) else None
    found: Dependencies = []
    for item in deps if isinstance(deps, list) else ():
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            found.append((item["name"], str(item.get("version", "*"))))
    return found


def set_dependency(text: str, name: str, version: str, package_name: str) -> str:
    """`text` with dependency `name` at `version` (added, or its version replaced).

    Without a Package document one is added first, named `package_name`.
    """
    wanted = _replaced(read_dependencies(text), name, version)
    package = _package_node(text)
    if package is None:
        new = _new_package_doc(package_name, wanted) + _separator(text) + text
        return _checked(new, wanted)
    spec = _value(package, "spec")
    if spec is None:
        at = _line_after(text, _content_end(package))
        indent = " " * package.value[0][0].start_mark.column
        block = _block({"spec": {"dependencies": _items(wanted)}}, indent)
        return _checked(text[:at] + _ensure_newline(text[:at]) + block + text[at:], wanted)
    deps = _value(spec, "dependencies") if isinstance(spec, yaml.MappingNode) else None
    if not isinstance(spec, yaml.MappingNode) or (spec.flow_style and deps is None):
        return _checked(_replace_node(text, spec, {"dependencies": _items(wanted)}), wanted)
    if deps is None:
        at = _line_after(text, _content_end(spec))
        indent = " " * spec.value[0][0].start_mark.column
        block = _block({"dependencies": _items(wanted)}, indent)
        return _checked(text[:at] + _ensure_newline(text[:at]) + block + text[at:], wanted)
    if not isinstance(deps, yaml.SequenceNode) or deps.flow_style or not deps.value:
        return _checked(_replace_node(text, deps, _items(wanted)), wanted)
    for item in deps.value:
        if isinstance(item, yaml.MappingNode) and _scalar(_value(item, "name")) == name:
            node = _value(item, "version")
            if node is None or not isinstance(node, yaml.ScalarNode):
                new = _splice(text, item, _flow({"name": name, "version": version}))
            else:
                new = _splice(text, node, json.dumps(version))
            return _checked(new, wanted)
    last = deps.value[-1]
    at = _line_after(text, _content_end(last))
    dash = " " * deps.start_mark.column
    if isinstance(last, yaml.MappingNode) and last.flow_style:
        line = f"{dash}- {_flow({'name': name, 'version': version})}\n"
    else:
        line = f"{dash}- name: {json.dumps(name)}\n{dash}  version: {json.dumps(version)}\n"
    return _checked(text[:at] + _ensure_newline(text[:at]) + line + text[at:], wanted)


def remove_dependency(text: str, name: str) -> str:
    """`text` without dependency `name`; `EditError` when it has no such dependency."""
    current = read_dependencies(text)
    if name not in {n for n, _ in current}:
        raise EditError(f"goondan.yaml has no dependency {name}")
    wanted = [(n, v) for n, v in current if n != name]
    package = _package_node(text)
    spec = _value(package, "spec") if package is not None else None
    deps = _value(spec, "dependencies") if isinstance(spec, yaml.MappingNode) else None
    if not isinstance(deps, yaml.SequenceNode):
        raise EditError("spec.dependencies is not a list")
    if deps.flow_style or len(deps.value) == 1:
        return _checked(_replace_node(text, deps, _items(wanted)), wanted)
    for item in deps.value:
        if isinstance(item, yaml.MappingNode) and _scalar(_value(item, "name")) == name:
            start = text.rfind("\n", 0, item.start_mark.index) + 1
            end = _line_after(text, _content_end(item))
            return _checked(text[:start] + text[end:], wanted)
    raise EditError(f"goondan.yaml has no dependency {name}")


# -- helpers -------------------------------------------------------------------------------------


def _replaced(deps: Dependencies, name: str, version: str) -> Dependencies:
    if any(n == name for n, _ in deps):
        return [(n, version if n == name else v) for n, v in deps]
    return [*deps, (name, version)]


def _items(deps: Dependencies) -> list[dict[str, str]]:
    return [{"name": n, "version": v} for n, v in deps]


def _package_node(text: str) -> yaml.MappingNode | None:
    try:
        first = next(iter(yaml.compose_all(text, Loader=yaml.SafeLoader)), None)
    except yaml.YAMLError as exc:
        raise EditError(f"goondan.yaml is not valid YAML: {exc}") from exc
    if isinstance(first, yaml.MappingNode) and _scalar(_value(first, "kind")) == "Package":
        if first.flow_style or not first.value:
            raise EditError("the Package document is written in flow style; edit it by hand")
        return first
    return None


def _value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if _scalar(k) == key:
            found: yaml.Node = v
            return found
    return None


def _scalar(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _content_end(node: yaml.Node) -> int:
    """Where a node's own text ends. A block collection's end mark is the next token, past
    any comments and less-indented lines that follow it; its last leaf's is exact."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
        return _content_end(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
        return _content_end(node.value[-1])
    return int(node.end_mark.index)


def _line_after(text: str, index: int) -> int:
    """The start of the line after the one `index` is on (or `index`, at a line start)."""
    if index > 0 and text[index - 1] == "\n":
        return index
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline + 1


def _ensure_newline(before: str) -> str:
    return "" if not before or before.endswith("\n") else "\n"


def _splice(text: str, node: yaml.Node, replacement: str) -> str:
    start = node.start_mark.index
    if text[start - 1 : start] == ":":  # an empty value: `key:` needs a space before it
        replacement = " " + replacement
    return text[:start] + replacement + text[_content_end(node) :]


def _replace_node(text: str, node: yaml.Node, value: Any) -> str:
    """Replace a flow or empty node by `value` in flow style (one line, no comments lost)."""
    return _splice(text, node, _flow(value))


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return json.dumps(value)


def _block(value: dict[str, Any], indent: str) -> str:
    lines = []
    for key, item in value.items():
        if isinstance(item, dict):
            lines.append(f"{indent}{key}:\n" + _block(item, indent + "  "))
        elif isinstance(item, list):
            lines.append(f"{indent}{key}:\n")
            for entry in item:
                pairs = [f"{k}: {json.dumps(v)}" for k, v in entry.items()]
                lines.append(f"{indent}  - {pairs[0]}\n")
                lines.extend(f"{indent}    {p}\n" for p in pairs[1:])
        else:
            lines.append(f"{indent}{key}: {json.dumps(item)}\n")
    return "".join(lines)


def _new_package_doc(package_name: str, deps: Dependencies) -> str:
    head = (
        f"apiVersion: {API_VERSION}\nkind: Package\nmetadata:\n  name: {json.dumps(package_name)}\n"
    )
    return head + _block({"spec": {"dependencies": _items(deps)}}, "")


def _separator(text: str) -> str:
    """`---` before the old first document, unless the file already starts with one."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        return "" if re.match(r"^---(\s|$)", stripped) else "---\n"
    return ""


def _checked(new: str, wanted: Dependencies) -> str:
    try:
        got = read_dependencies(new)
    except EditError:
        got = None
    if got != wanted:
        listed = ", ".join(f"{n}@{v}" for n, v in wanted) or "none"
        raise EditError(
            "could not edit goondan.yaml without disturbing it; set the Package's "
            f"spec.dependencies by hand to: {listed}"
        )
    return new
