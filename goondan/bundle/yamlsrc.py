"""Parse one YAML file into `YamlDoc`s, enforcing the loader limits (size, documents, aliases).

PyYAML's composer gives nodes with marks; we build plain data from them ourselves so that every
key keeps its line number, duplicate keys are caught (PyYAML silently keeps the last one) and
alias expansion is bounded (a "billion laughs" document would otherwise exhaust memory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from goondan.bundle import codes
from goondan.bundle.errors import ConfigError
from goondan.bundle.located import YamlDoc, YPath, display_path
from goondan.bundle.reading import TooLarge, UnsafeFile, read_regular_file

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's C loader if present
_PLAIN_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}
_TEXT_TAGS = {"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:binary"}  # keep as written
_MAX_DEPTH = 64
_ALIAS_FACTOR = 10  # upstream: anchor expansion beyond 10x SHOULD be rejected
_ALIAS_SLACK = 1000


class _TooBig(Exception):
    """Alias expansion or nesting went past the limits."""


class _Builder:
    """Turns one document's node graph into plain data, recording lines and problems."""

    def __init__(self, file: Path, budget: int) -> None:
        self.file = file
        self.budget = budget
        self.visits = 0
        self.lines: dict[YPath, int] = {}
        self.errors: list[ConfigError] = []
        self._constructor = SafeConstructor()

    def build(self, node: Node, path: YPath, depth: int = 0) -> Any:
        self.visits += 1
        if self.visits > self.budget:
            raise _TooBig(f"YAML aliases expand to more than {self.budget} nodes")
        if depth > _MAX_DEPTH:
            raise _TooBig(
                f"YAML is nested more than {_MAX_DEPTH} levels (or an alias is recursive)"
            )
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            out: list[Any] = []
            for i, item in enumerate(node.value):
                self.lines[(*path, i)] = item.start_mark.line + 1
                out.append(self.build(item, (*path, i), depth + 1))
            return out
        return self._scalar(node, path)

    def _mapping(self, node: MappingNode, path: YPath, depth: int) -> dict[str, Any]:
        explicit = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
        try:
            self._constructor.flatten_mapping(node)  # resolve `<<: *anchor` merge keys
        except ConstructorError as exc:
            self._error(node, path, f"invalid YAML merge key: {exc.problem}")
            return {}
        merged = len(node.value) - explicit  # merged pairs come first and may be overridden
        out: dict[str, Any] = {}
        seen: set[str] = set()
        for i, (knode, vnode) in enumerate(node.value):
            if not isinstance(knode, ScalarNode):
                self._error(knode, path, "mapping keys must be plain strings")
                continue
            key = str(knode.value)
            if i >= merged:
                if key in seen:
                    self._error(
                        knode, (*path, key), f"duplicate key '{key}' (YAML keeps only the last)"
                    )
                seen.add(key)
            self.lines[(*path, key)] = knode.start_mark.line + 1
            out[key] = self.build(vnode, (*path, key), depth + 1)
        return out

    def _scalar(self, node: Node, path: YPath) -> Any:
        if node.tag in _PLAIN_TAGS:
            return self._constructor.construct_object(node)
        if node.tag in _TEXT_TAGS:
            return str(node.value)
        self._error(node, path, f"unsupported YAML tag '{node.tag}'")
        return None

    def _error(self, node: Node, path: YPath, message: str) -> None:
        self.errors.append(
            ConfigError(
                code=codes.PARSE_ERROR,
                message=message,
                file=display_path(self.file),
                line=node.start_mark.line + 1,
                suggestion="write plain YAML: string keys, no custom tags, each key once",
            )
        )


def _count_nodes(root: Node) -> int:
    """Distinct nodes in the graph (aliases share nodes, so this is the unexpanded size)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
    return len(seen)


def read_documents(file: Path) -> tuple[list[YamlDoc], list[ConfigError]]:
    """All documents of `file`. Problems are returned, not raised; documents parsed before a
    syntax error are still returned so later checks do not cascade into spurious errors."""
    shown = display_path(file)

    def fail(code: str, message: str, suggestion: str, line: int | None = None) -> ConfigError:
        return ConfigError(code=code, message=message, file=shown, line=line, suggestion=suggestion)

    try:
        text = read_regular_file(file, codes.MAX_FILE_BYTES).decode("utf-8-sig")
    except TooLarge:
        return [], [
            fail(
                codes.FILE_TOO_LARGE,
                f"file is over {codes.MAX_FILE_BYTES} bytes, the most a resource file may "
                "hold (1 MB)",
                "split the resources into several files (agents.yaml, tools.yaml, ...)",
            )
        ]
    except UnsafeFile as exc:
        return [], [fail(codes.NOT_A_REGULAR_FILE, str(exc), "make it an ordinary file")]
    except UnicodeDecodeError as exc:
        return [], [
            fail(codes.PARSE_ERROR, f"file is not UTF-8 text ({exc.reason})", "save it as UTF-8")
        ]
    except OSError as exc:
        return [], [fail(codes.PARSE_ERROR, f"cannot read file: {exc.strerror}", "check it")]

    docs: list[YamlDoc] = []
    errors: list[ConfigError] = []
    try:
        for index, node in enumerate(yaml.compose_all(text, Loader=_Loader)):
            if index >= codes.MAX_DOCUMENTS:
                errors.append(
                    fail(
                        codes.TOO_MANY_DOCUMENTS,
                        f"file holds more than {codes.MAX_DOCUMENTS} YAML documents",
                        "split the resources into several files",
                        node.start_mark.line + 1 if node is not None else None,
                    )
                )
                break
            if node is None:
                continue
            builder = _Builder(file, _ALIAS_FACTOR * _count_nodes(node) + _ALIAS_SLACK)
            builder.lines[()] = node.start_mark.line + 1
            try:
                data = builder.build(node, ())
            except _TooBig as exc:
                errors.append(
                    fail(
                        codes.PARSE_ERROR,
                        str(exc),
                        "remove the recursive or repeated aliases (&anchor / *alias)",
                        node.start_mark.line + 1,
                    )
                )
                continue
            errors.extend(builder.errors)
            docs.append(YamlDoc(file=file, index=index, data=data, lines=builder.lines))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        errors.append(
            fail(
                codes.PARSE_ERROR,
                f"YAML syntax error: {what}",
                "fix the YAML syntax (indentation, quotes, ':' after keys)",
                mark.line + 1 if mark else None,
            )
        )
    except yaml.YAMLError as exc:
        errors.append(fail(codes.PARSE_ERROR, f"YAML error: {exc}", "fix the YAML syntax"))
    return docs, errors
