"""Reuse a loaded bundle while none of its resource files changed.

The agent template process loads the daemon's bundle once; every agent forked from it then
finds the bundle here instead of parsing and validating the YAML again (which is most of an
agent's start-up time, and memory it would not share with its siblings).
"""

from __future__ import annotations

import os
from pathlib import Path

from goondan.bundle.bundle import Bundle
from goondan.bundle.discover import base_package_dir, main_file, resource_files
from goondan.bundle.loader import load_bundle

Signature = tuple[tuple[str, int, int], ...]
_cache: dict[Path, tuple[Signature, Bundle]] = {}


def load_bundle_cached(path: str | Path) -> Bundle:
    """`load_bundle`, unless the same bundle was loaded before and no resource file (of the
    bundle or of the built-in package) has changed since. Raises `BundleInvalid` like it."""
    root = Path(path).resolve()
    signature = _signature(root)
    hit = _cache.get(root)
    if signature is not None and hit is not None and hit[0] == signature:
        return hit[1]
    bundle = load_bundle(path)
    if signature is not None:
        _cache[root] = (signature, bundle)
    return bundle


def _signature(root: Path) -> Signature | None:
    """(path, mtime_ns, size) of every resource file; None when it cannot be taken."""
    directory = root if root.is_dir() else root.parent
    main = main_file(directory)
    base = base_package_dir()
    base_main = main_file(base)
    if main is None or base_main is None:
        return None
    files = [*resource_files(directory, main), *resource_files(base, base_main)]
    entries = []
    for file in files:
        try:
            info = os.stat(file)
        except OSError:
            return None
        entries.append((str(file), info.st_mtime_ns, info.st_size))
    return tuple(entries)
