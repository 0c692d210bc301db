"""Which files make up a bundle: its goondan.yaml plus resource files anywhere below it."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

# Upstream BundleLoader picks up these base names (with .yaml / .yml) anywhere in the tree.
RESOURCE_STEMS = frozenset(
    {
        "goondan",
        "model",
        "models",
        "agent",
        "agents",
        "tool",
        "tools",
        "extension",
        "extensions",
        "connector",
        "connectors",
        "connection",
        "connections",
        "swarm",
        "swarms",
        "resources",
    }
)
SUFFIXES = (".yaml", ".yml")
# Build output, dependencies and environments hold copies or unrelated YAML.
SKIP_DIRS = frozenset({"dist", "node_modules", "__pycache__", "venv", "site-packages"})


def main_file(directory: Path) -> Path | None:
    for name in ("goondan.yaml", "goondan.yml"):
        if (directory / name).is_file():
            return directory / name
    return None


def resource_files(root: Path, main: Path) -> list[Path]:
    """`main` first, then every other resource file under `root`, in a stable order."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):  # does not follow directory symlinks
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            stem, suffix = os.path.splitext(name)
            if suffix in SUFFIXES and stem in RESOURCE_STEMS:
                path = Path(dirpath, name)
                if path != main:
                    found.append(path)
    return [main, *found]


def base_package_dir() -> Path:
    """Directory of the built-in `@goondan/base` package (the `base_tools` Python package).

    Found without importing it: the tools' modules are loaded by agent processes, not here.
    """
    spec = importlib.util.find_spec("base_tools")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the base_tools package is not installed; reinstall goondan")
    return Path(next(iter(spec.submodule_search_locations))).resolve()
