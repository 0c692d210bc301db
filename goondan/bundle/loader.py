"""`load_bundle`: files -> documents -> resources -> cross-checks -> `Bundle`, or every error.

A bundle is its directory's goondan.yaml plus the resource files below it (`discover.py`),
always together with the built-in `@goondan/base` package and the installed packages its
Package document depends on (`packages.py`). Each document is checked on its
own first (`envelope.py`, `spec_*.py`), then against the others (`validate.py`). Nothing a
user can write makes this raise anything but `BundleInvalid`.
"""

from __future__ import annotations

import sys
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
from goondan.bundle.model import LOCAL_SCOPE, PackageSpec, Resource, Source
from goondan.bundle.packages import BASE_PACKAGE, InstalledPackage, installed_packages
from goondan.bundle.spec_agents import parse_agent, parse_model, parse_package, parse_swarm
from goondan.bundle.spec_code import parse_connector, parse_extension, parse_tool
from goondan.bundle.spec_connection import parse_connection
from goondan.bundle.validate import Draft, check_all, drop_duplicates
from goondan.bundle.yamlsrc import read_documents

__all__ = ["BASE_PACKAGE", "load_bundle"]

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

    if package_name == BASE_PACKAGE:
        _package_draft(local).checker.error(
            ("metadata", "name"),
            f"the bundle's package may not be named {package_name}: "
            "that name belongs to the built-in package",
            "rename the Package",
            codes.INVALID_NAME,
        )

    packages, package_files, package_roots = _load_packages(local, base_dir, errors)
    drafts = drop_duplicates(local + packages)
    bundle = Bundle(root, [d.resource for d in drafts], package_name, package_roots)
    check_all(drafts, bundle)
    if errors:
        raise BundleInvalid(_ordered(errors, [*local_files, *package_files]))
    return bundle


def _load_packages(
    local: list[Draft], base_dir: Path | None, errors: list[ConfigError]
) -> tuple[list[Draft], list[Path], dict[str, Path]]:
    """The drafts of `@goondan/base` and of every package the bundle depends on, directly or
    through another package, each checked against the version range that asks for it."""
    installed = installed_packages()
    # (package, range or None, the Package draft that asks, index in its dependencies)
    wanted: list[tuple[str, str | None, Draft | None, int]] = [(BASE_PACKAGE, None, None, 0)]
    wanted.extend(_dependencies_of(local))
    drafts: list[Draft] = []
    files: list[Path] = []
    roots: dict[str, Path] = {}
    versions: dict[str, str] = {}
    while wanted:
        name, wanted_range, asker, index = wanted.pop(0)
        package = installed.get(name)
        if name not in versions:
            loaded = _load_package(name, package, base_dir, asker, index, errors)
            if loaded is None:
                continue
            pkg_drafts, pkg_files, pkg_root, version = loaded
            drafts.extend(pkg_drafts)
            files.extend(pkg_files)
            roots[name] = pkg_root
            versions[name] = version
            wanted.extend(_dependencies_of(pkg_drafts))
        # goondan ships exactly one @goondan/base, and upstream bundles ask for theirs
        # (`^1.0.0`): `validate` warns about that range (`base_range_warnings`), run accepts it.
        if wanted_range is not None and asker is not None and name != BASE_PACKAGE:
            _check_range(name, versions[name], wanted_range, package, asker, index)
    return drafts, files, roots


def _dependencies_of(drafts: list[Draft]) -> list[tuple[str, str | None, Draft | None, int]]:
    for draft in drafts:
        spec = draft.resource.spec
        if draft.resource.kind == "Package" and isinstance(spec, PackageSpec):
            return [(d.name, d.version, draft, i) for i, d in enumerate(spec.dependencies)]
    return []


def _load_package(
    name: str,
    package: InstalledPackage | None,
    base_dir: Path | None,
    asker: Draft | None,
    index: int,
    errors: list[ConfigError],
) -> tuple[list[Draft], list[Path], Path, str] | None:
    """(drafts, files, root, version) of one installed package, or None (reported)."""
    where = ("spec", "dependencies", index, "name")
    if name == BASE_PACKAGE and (base_dir is not None or package is None):
        # Without goondan's entry point (an install older than its pyproject), base_tools/
        # is still where the built-in package lives.
        root = (base_dir or base_package_dir()).resolve()
        origin = f"built-in package {BASE_PACKAGE}"
        version: str | None = None
    elif package is None or package.root is None:
        if asker is not None:
            problem = (
                "is not installed in this Python environment"
                if package is None
                else f"is declared by distribution {package.distribution}, but its module "
                f"{package.module} cannot be found"
            )
            asker.checker.error(
                where,
                f"package {name} {problem} ({sys.prefix})",
                f"install it: goondan package add {name} (see docs/packages.md)",
                codes.PACKAGE_NOT_INSTALLED,
            )
        return None
    else:
        root, origin, version = package.root, f"package {package.label}", package.version
    main = main_file(root)
    if main is None:
        errors.append(
            ConfigError(
                code=codes.FILE_NOT_FOUND,
                message=f"{origin} has no goondan.yaml in {display_path(root)}",
                suggestion="reinstall goondan"
                if name == BASE_PACKAGE
                else "the package's module directory must hold its goondan.yaml",
            )
        )
        return None
    files = resource_files(root, main)
    drafts, declared = _load_files(files, main, root, name, errors)
    if declared is not None and declared != name:
        _package_draft(drafts).checker.error(
            ("metadata", "name"),
            f"{origin} is installed under the name {name} but its Package is named {declared}",
            f"name the Package {name}, or the entry point {declared}",
            codes.INVALID_NAME,
        )
    if version is None:
        spec = next((d.resource.spec for d in drafts if d.resource.kind == "Package"), None)
        version = spec.version if isinstance(spec, PackageSpec) and spec.version else "0.0.0"
    return drafts, files, root, version


def _check_range(
    name: str,
    version: str,
    wanted: str,
    package: InstalledPackage | None,
    asker: Draft,
    index: int,
) -> None:
    # Only third-party packages' ranges are checked: most runs never load semver's patterns.
    from goondan.bundle.semver import Range, SemverError, Version

    path = ("spec", "dependencies", index, "version")
    try:
        ok = Range.parse(wanted).satisfied_by(Version.parse(version))
    except SemverError as exc:
        asker.checker.error(path, str(exc), "use a semver range such as ^1.2.0 or ~1.2")
        return
    if not ok:
        dist = f" (distribution {package.distribution})" if package else ""
        asker.checker.error(
            path,
            f"{name} {version} is installed{dist}, but {asker.resource.label} "
            f"asks for {name}@{wanted}",
            f"install a matching version (goondan package add '{name}@{wanted}'), "
            "or widen the range",
            codes.PACKAGE_VERSION_MISMATCH,
        )


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


def base_range_warnings(bundle: Bundle) -> list[ConfigError]:
    """A warning for a bundle that asks for a `@goondan/base` other than the built-in one."""
    from goondan.bundle.semver import Range, SemverError, Version

    package = bundle.local("Package", bundle.package_name or "")
    base = installed_packages().get(BASE_PACKAGE)
    if package is None or not isinstance(package.spec, PackageSpec) or base is None:
        return []
    warnings = []
    for i, dep in enumerate(package.spec.dependencies):
        if dep.name != BASE_PACKAGE:
            continue
        try:
            ok = Range.parse(dep.version).satisfied_by(Version.parse(base.version))
        except SemverError:
            ok = False
        if not ok:
            warnings.append(
                ConfigError(
                    code=codes.PACKAGE_VERSION_MISMATCH,
                    message=f"{BASE_PACKAGE} is built into goondan at {base.version}, outside "
                    f"the range {dep.version}; the built-in one is used",
                    file=display_path(package.source.file),
                    line=package.source.line,
                    path=f"{package.label}.spec.dependencies[{i}].version",
                    suggestion=f'use version: "*" (or "^{base.version}")',
                    severity="warning",
                )
            )
    return warnings
