"""Goondan packages installed in this Python environment, found through entry points.

A Goondan package is an ordinary Python distribution that declares, in the entry point group
`goondan.packages`, an entry named after the package (`@acme/search`) whose value is a module;
that module's directory holds the package's goondan.yaml and its Python entries. goondan itself
declares `@goondan/base` the same way. Nothing is imported: the agent processes load entries.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ENTRY_POINT_GROUP = "goondan.packages"
BASE_PACKAGE = "@goondan/base"
LOCK_FILE = "goondan.lock.yaml"


@dataclass(frozen=True)
class InstalledPackage:
    name: str  # the Goondan package name: `@acme/search`
    distribution: str  # the Python distribution that provides it: `acme-search`
    version: str  # the distribution's version
    module: str  # the entry point's value
    root: Path | None  # the module's directory; None when the module cannot be found

    @property
    def label(self) -> str:
        return f"{self.name} {self.version} (distribution {self.distribution})"


_cache: tuple[tuple[tuple[str, int], ...], dict[str, InstalledPackage]] | None = None


def installed_packages() -> dict[str, InstalledPackage]:
    """Every Goondan package the environment provides, by package name.

    When two distributions claim one name the first one on sys.path wins, as for imports.
    Reading every distribution's entry points takes tens of milliseconds, so the answer is
    kept while no sys.path directory changed (installing or removing one changes its
    directory's mtime).
    """
    global _cache
    key = _path_key()
    if _cache is not None and _cache[0] == key:
        return dict(_cache[1])
    found = _scan()
    _cache = (key, found)
    return dict(found)


def _path_key() -> tuple[tuple[str, int], ...]:
    key = []
    for entry in sys.path:
        try:
            key.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            key.append((entry, 0))
    return tuple(key)


def _scan() -> dict[str, InstalledPackage]:
    found: dict[str, InstalledPackage] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            continue
        dist = ep.dist
        found[ep.name] = InstalledPackage(
            name=ep.name,
            distribution=dist.name if dist is not None else "?",
            version=dist.version if dist is not None else "0.0.0",
            module=ep.value.split(":", 1)[0].strip(),
            root=module_dir(ep.value.split(":", 1)[0].strip()),
        )
    return found


def find_package(name: str) -> InstalledPackage | None:
    return installed_packages().get(name)


def module_dir(module: str) -> Path | None:
    """The directory of `module` (a package's own directory, a plain module's parent),
    found without importing the module itself."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve()
    if spec.origin:
        return Path(spec.origin).resolve().parent
    return None


def default_distribution(name: str) -> str:
    """The distribution a package name is looked for under when no pip spec is given:
    `@acme/search` -> `acme-search`, `tools` -> `tools` (see docs/packages.md)."""
    return name.lstrip("@").replace("/", "-")


def refresh() -> None:
    """Forget what the import system cached, after pip changed the environment."""
    global _cache
    _cache = None
    importlib.invalidate_caches()
