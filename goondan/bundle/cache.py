"""Reuse a loaded bundle while none of its resource files changed.

The agent template process loads the daemon's bundle once; every agent forked from it then
finds the bundle here instead of parsing and validating the YAML again (which is most of an
agent's start-up time, and memory it would not share with its siblings).
"""

from __future__ import annotations

import os
from pathlib import Path

from goondan.bundle.bundle import Bundle
from goondan.bundle.discover import main_file, resource_files
from goondan.bundle.loader import load_bundle

Signature = tuple[tuple[str, int, int], ...]
_cache: dict[Path, tuple[Signature, Bundle]] = {}


def load_bundle_cached(path: str | Path) -> Bundle:
    """`load_bundle`, unless the same bundle was loaded before and no resource file (of the
    bundle or of a package it loaded) has changed since. Raises `BundleInvalid` like it."""
    root = Path(path).resolve()
    directory = root if root.is_dir() else root.parent
    hit = _cache.get(root)
    own = _signature(directory)
    if hit is not None and own is not None:
        packages = _packages_signature(hit[1])
        if packages is not None and hit[0] == own + packages:
            return hit[1]
    bundle = load_bundle(path)
    bundle.prime()  # in the template, before its agents are forked from it
    # The bundle's own files are signed before loading, so an edit made meanwhile reloads.
    packages = _packages_signature(bundle)
    if own is not None and packages is not None:
        _cache[root] = (own + packages, bundle)
    return bundle


def _packages_signature(bundle: Bundle) -> Signature | None:
    parts: Signature = ()
    for package in bundle.package_roots.values():
        part = _signature(package)
        if part is None:
            return None
        parts += part
    return parts


def _signature(directory: Path) -> Signature | None:
    """(path, mtime_ns, size) of every resource file; None when it cannot be taken."""
    main = main_file(directory)
    if main is None:
        return None
    entries = []
    for file in resource_files(directory, main):
        try:
            info = os.stat(file)
        except OSError:
            return None
        entries.append((str(file), info.st_mtime_ns, info.st_size))
    return tuple(entries)
