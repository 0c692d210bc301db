"""The common part of every resource document: apiVersion, kind, metadata, spec."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goondan.bundle import codes
from goondan.bundle.errors import ConfigError
from goondan.bundle.fields import Checker
from goondan.bundle.located import YamlDoc
from goondan.bundle.model import KINDS, Metadata
from goondan.bundle.names import (
    PACKAGE_NAME,
    PACKAGE_NAME_RULE,
    RESOURCE_NAME,
    RESOURCE_NAME_RULE,
)
from goondan.bundle.refs import type_name
from goondan.bundle.suggest import closest

_TOP_KEYS = ("apiVersion", "kind", "metadata", "spec")
_RESOURCE_HINT_KEYS = ("apiVersion", "metadata", "spec")  # a doc with these and no kind is a slip


@dataclass
class Envelope:
    kind: str
    metadata: Metadata | None  # None when the name is unusable (the document is then not indexed)
    spec: Any  # raw spec data, checked by the kind's parser
    checker: Checker


def read_envelope(doc: YamlDoc, errors: list[ConfigError], root: Path) -> Envelope | None:
    """Check the envelope; None for documents that are ignored or whose kind is unusable."""
    data = doc.data
    if data is None:  # an empty document (e.g. a trailing `---`)
        return None
    if not isinstance(data, dict):
        Checker(doc, f"document {doc.index + 1}", errors).error(
            (),
            f"a resource document must be a mapping, got {type_name(data)}",
            "start the document with 'apiVersion: goondan.ai/v1' and 'kind: ...'",
        )
        return None
    if "kind" not in data:
        if any(key in data for key in _RESOURCE_HINT_KEYS):  # a resource that forgot its kind
            Checker(doc, f"document {doc.index + 1}", errors).error(
                ("kind",),
                "'kind' is missing, so this document would be ignored",
                f"add 'kind:' with one of {', '.join(KINDS)}",
            )
        return None  # upstream: a document without kind is ignored

    kind, meta = data.get("kind"), data.get("metadata")
    raw_name = meta.get("name") if isinstance(meta, dict) else None
    label = f"{kind}/{raw_name}" if isinstance(raw_name, str) and raw_name else f"{kind}"
    chk = Checker(doc, label, errors, root=root)

    for key in data:
        if key not in _TOP_KEYS:
            hit = closest(key, _TOP_KEYS)
            chk.error(
                (key,),
                f"unknown top-level field '{key}'",
                f"did you mean '{hit}'?" if hit else f"allowed: {', '.join(_TOP_KEYS)}",
            )
    _check_api_version(chk, data)
    if not isinstance(kind, str) or kind not in KINDS:
        hit = closest(str(kind), KINDS)
        chk.error(
            ("kind",),
            f"unknown kind '{kind}'",
            f"did you mean '{hit}'?" if hit else f"use one of {', '.join(KINDS)}",
            codes.UNKNOWN_KIND,
        )
        return None
    metadata = _read_metadata(chk, meta, kind)
    spec = data.get("spec")
    if spec is None and kind != "Package":
        chk.error(("spec",), "required field 'spec' is missing", f"add the {kind} spec")
    return Envelope(kind=kind, metadata=metadata, spec=spec, checker=chk)


def _check_api_version(chk: Checker, data: dict[str, Any]) -> None:
    version = data.get("apiVersion")
    if version == codes.API_VERSION:
        return
    message = (
        "'apiVersion' is missing" if version is None else f"apiVersion '{version}' is not supported"
    )
    chk.error(
        ("apiVersion",) if version is not None else (),
        f"{message}; expected {codes.API_VERSION}",
        f"write 'apiVersion: {codes.API_VERSION}'",
        codes.UNSUPPORTED_API_VERSION,
    )


def _read_metadata(chk: Checker, meta: Any, kind: str) -> Metadata | None:
    if meta is None:
        chk.error(
            ("metadata",),
            "required field 'metadata' is missing",
            "add 'metadata:' with 'name: <name>'",
            codes.INVALID_NAME,
        )
        return None
    data = chk.mapping(("metadata",), meta, ("name", "labels", "annotations"))
    if data is None:
        return None
    name = data.get("name")
    rule, pattern = (
        (PACKAGE_NAME_RULE, PACKAGE_NAME)
        if kind == "Package"
        else (RESOURCE_NAME_RULE, RESOURCE_NAME)
    )
    if not isinstance(name, str) or not pattern.match(name):
        got = (
            "missing" if name is None else f"'{name}'" if isinstance(name, str) else type_name(name)
        )
        chk.error(
            ("metadata", "name"),
            f"invalid {kind} name ({got}): expected {rule}",
            "pick a name such as 'my-agent'" if kind != "Package" else "e.g. '@me/my-swarm'",
            codes.INVALID_NAME,
        )
        return None
    # An empty `labels:` reads as null; treat it like an absent field.
    labels = chk.string_map(("metadata", "labels"), data.get("labels") or {})
    annotations = chk.string_map(("metadata", "annotations"), data.get("annotations") or {})
    return Metadata(name=name, labels=labels, annotations=annotations)
