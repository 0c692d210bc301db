"""`load_bundle`: files -> documents -> resources -> cross-checks -> `Bundle`, or every error.

A bundle is its directory's goondan.yaml plus the resource files below it (`discover.py`),
always together with the built-in `@goondan/base` package. Each document is checked on its
own first (`envelope.py`, `spec_*.py`), then against the others (`validate.py`). Nothing a
user can write makes this raise anything but `BundleInvalid`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from goondan.bundle import codes
from goondan.bundle.bundle import Bundle
from goondan.bundle.discover import base_package_dir, main_file, resource_files
from goondan.bundle.envelope import Envelope, read_envelope
from goondan.bundle.errors import BundleInvalid, ConfigError
from goondan.bundle.fields import Checker
from goondan.bundle.located import display_path
from goondan.bundle.model import LOCAL_SCOPE, Resource, Source
from goondan.bundle.spec_agents import parse_agent, parse_model, parse_package, parse_swarm
from goondan.bundle.spec_code import parse_connector, parse_extension, parse_tool
from goondan.bundle.spec_connection import parse_connection
from goondan.bundle.validate import Draft, check_all, drop_duplicates
from goondan.bundle.yamlsrc import read_documents

BASE_PACKAGE = "@goondan/base"

SpecParser = Callable[[Checker, Any, "str | None"], Any]
PARSERS: dict[str, SpecParser] = {
    "Package": parse_package,
    "Model": parse_model,
    "Agent": parse_agent,
    "Swarm": parse_swarm,
    "Tool": parse_tool,
    "Extension": parse_extension,
    "Connector": parse_connector,
    "Connection": parse_connection,
}


def load_bundle(path: str | Path, *, base_dir: Path | None = None) -> Bundle:
    """Load and validate the bundle at `path` (a directory with goondan.yaml, or the file).

    `base_dir` overrides where `@goondan/base` is read from (tests use a copy).
    Raises `BundleInvalid` with every problem found.
    """
    root, main = _locate(Path(path))
    errors: list[ConfigError] = []
    local_files = resource_files(root, main)
    local, package_name = _load_files(local_files, main, root, LOCAL_SCOPE, errors)

    base_root = (base_dir or base_package_dir()).resolve()
    base_main = main_file(base_root)
    base: list[Draft] = []
    base_files: list[Path] = []
    if base_main is None:
        errors.append(
            ConfigError(
                code=codes.FILE_NOT_FOUND,
                message=f"built-in package {BASE_PACKAGE} has no goondan.yaml "
                f"in {display_path(base_root)}",
                suggestion="reinstall goondan",
            )
        )
    else:
        base_files = resource_files(base_root, base_main)  # goondan.yaml + extensions.yaml
        base, _ = _load_files(base_files, base_main, base_root, None, errors)

    if package_name is not None and package_name in {d.resource.package for d in base}:
        _package_draft(local).checker.error(
            ("metadata", "name"),
            f"the bundle's package may not be named {package_name}: "
            "that name belongs to the built-in package",
            "rename the Package",
            codes.INVALID_NAME,
        )

    drafts = drop_duplicates(local + base)
    bundle = Bundle(root, [d.resource for d in drafts], package_name)
    check_all(drafts, bundle)
    if errors:
        raise BundleInvalid(_ordered(errors, [*local_files, *base_files]))
    return bundle


def _locate(path: Path) -> tuple[Path, Path]:
    """(bundle root, main goondan.yaml), or `BundleInvalid` saying what was expected."""
    hint = "pass a bundle directory that contains goondan.yaml, or the goondan.yaml file itself"
    if not path.exists():
        raise BundleInvalid(
            [
                ConfigError(
                    code=codes.FILE_NOT_FOUND,
                    message="no such file or directory",
                    file=str(path),
                    suggestion=hint,
                )
            ]
        )
    if path.is_dir():
        main = main_file(path)
        if main is None:
            raise BundleInvalid(
                [
                    ConfigError(
                        code=codes.FILE_NOT_FOUND,
                        message=f"{path} has no goondan.yaml",
                        file=str(path),
                        suggestion=hint,
                    )
                ]
            )
        return path.resolve(), main.resolve()
    return path.parent.resolve(), path.resolve()


def _load_files(
    files: list[Path], main: Path, root: Path, scope: str | None, errors: list[ConfigError]
) -> tuple[list[Draft], str | None]:
    """Drafts of every resource in `files`, and the package name from main's Package doc.

    `scope=None` means "the package the Package document names" (for `@goondan/base`).
    """
    pending: list[tuple[Envelope, Source]] = []
    package_name: str | None = None
    for file in files:
        docs, problems = read_documents(file)
        errors.extend(problems)
        seen_resource = seen_package = False
        for doc in docs:
            is_resource = isinstance(doc.data, dict) and "kind" in doc.data
            env = read_envelope(doc, errors, root)
            if env is not None and env.kind == "Package":
                if not _package_position_ok(env, file == main, seen_resource, seen_package):
                    env = None
                else:
                    package_name = env.metadata.name if env.metadata else None
                seen_package = True
            seen_resource = seen_resource or is_resource
            if env is not None:
                pending.append(
                    (env, Source(file=file, line=doc.line, doc_index=doc.index, root=root))
                )
    resource_scope = scope or package_name or BASE_PACKAGE
    drafts: list[Draft] = []
    for env, source in pending:
        name = env.metadata.name if env.metadata else None
        missing = env.spec is None and env.kind != "Package"  # already reported by the envelope
        spec = None if missing else PARSERS[env.kind](env.checker, env.spec, name)
        if env.metadata is None:  # nameless: reported, and cannot be referenced
            continue
        resource = Resource(
            kind=env.kind, metadata=env.metadata, spec=spec, package=resource_scope, source=source
        )
        drafts.append(Draft(resource=resource, checker=env.checker))
    return drafts, package_name


def _package_position_ok(
    env: Envelope, in_main: bool, seen_resource: bool, seen_package: bool
) -> bool:
    if seen_package:
        env.checker.error(
            ("kind",),
            "a second Package document; goondan.yaml may hold only one",
            "merge the two Package documents",
            codes.PACKAGE_DOC_DUPLICATED,
        )
        return False
    if not in_main or seen_resource:
        message = (
            "a Package document must be the first document of goondan.yaml"
            if in_main
            else "a Package document may only appear at the top of the bundle's goondan.yaml"
        )
        env.checker.error(
            ("kind",), message, "move it to the top of goondan.yaml", codes.PACKAGE_DOC_POSITION
        )
        return False
    return True


def _package_draft(drafts: list[Draft]) -> Draft:
    return next(d for d in drafts if d.resource.kind == "Package")


def _ordered(errors: list[ConfigError], files: list[Path]) -> list[ConfigError]:
    """Unique errors, by file (goondan.yaml first) and line, so they read top to bottom."""
    rank = {display_path(f): i for i, f in enumerate(files)}
    unique = list(dict.fromkeys(errors))
    return sorted(unique, key=lambda e: (rank.get(e.file or "", -1), e.line or 0))
