"""`goondan.lock.yaml`: the exact wheel each of a bundle's packages was installed from.

```yaml
lockfileVersion: 1
packages:
  "@acme/search":
    version: 1.2.0
    distribution: acme-search
    wheel: acme_search-1.2.0-py3-none-any.whl
    sha256: 3f7a...
    source: acme-search==1.2.0        # what `goondan package install` fetches again
```

`goondan package` writes it; `goondan package install` reinstalls each wheel after checking its
sha256; `goondan validate` reports an entry that disagrees with what is installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from goondan.bundle import codes
from goondan.bundle.errors import ConfigError
from goondan.bundle.located import display_path
from goondan.bundle.packages import LOCK_FILE, InstalledPackage
from goondan.files import replace_file

LOCKFILE_VERSION = 1
HEADER = (
    "# Written by `goondan package`; do not edit. `goondan package install` reinstalls exactly\n"
    "# these wheels (their sha256 is checked); commit this file with goondan.yaml.\n"
)


@dataclass(frozen=True)
class LockEntry:
    name: str
    version: str
    distribution: str
    wheel: str
    sha256: str
    source: str
    line: int = 0  # where the entry starts in the file (1-based; 0 when not read from one)

    def to_yaml(self) -> dict[str, str]:
        return {
            "version": self.version,
            "distribution": self.distribution,
            "wheel": self.wheel,
            "sha256": self.sha256,
            "source": self.source,
        }


class LockError(Exception):
    pass


def lock_path(root: Path) -> Path:
    return root / LOCK_FILE


def read_lock(root: Path) -> dict[str, LockEntry]:
    """The entries of `root`'s lockfile, by package name; {} when there is none."""
    path = lock_path(root)
    if not path.is_file():
        return {}
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise LockError(f"{display_path(path)} cannot be read: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("packages") or {}, dict):
        raise LockError(f"{display_path(path)}: expected a mapping with `packages`")
    if data.get("lockfileVersion") != LOCKFILE_VERSION:
        raise LockError(
            f"{display_path(path)}: lockfileVersion {data.get('lockfileVersion')!r} "
            f"is not {LOCKFILE_VERSION}"
        )
    lines = _entry_lines(node)
    entries: dict[str, LockEntry] = {}
    for name, item in (data.get("packages") or {}).items():
        fields = ("version", "distribution", "wheel", "sha256", "source")
        if not isinstance(item, dict) or any(not isinstance(item.get(f), str) for f in fields):
            raise LockError(
                f"{display_path(path)}:{lines.get(name, 0)}: entry {name} needs "
                f"string fields {', '.join(fields)}"
            )
        entries[str(name)] = LockEntry(
            name=str(name), line=lines.get(name, 0), **{f: item[f] for f in fields}
        )
    return entries


def _entry_lines(node: Any) -> dict[str, int]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    for key, value in node.value:
        if key.value == "packages" and isinstance(value, yaml.MappingNode):
            return {k.value: k.start_mark.line + 1 for k, _ in value.value}
    return {}


def write_lock(root: Path, entries: dict[str, LockEntry]) -> Path:
    """Write the lockfile atomically, entries sorted by name; an empty lock removes the file."""
    path = lock_path(root)
    if not entries:
        path.unlink(missing_ok=True)
        return path
    lines = [HEADER, f"lockfileVersion: {LOCKFILE_VERSION}\n", "packages:\n"]
    for name in sorted(entries):
        lines.append(f"  {json.dumps(name)}:\n")
        lines.extend(f"    {k}: {json.dumps(v)}\n" for k, v in entries[name].to_yaml().items())
    # Committed beside the bundle: readable by all, as any file the user writes.
    replace_file(path, "".join(lines).encode(), mode=0o644, what="the lockfile")
    return path


def lock_problems(root: Path, installed: dict[str, InstalledPackage]) -> list[ConfigError]:
    """Each lock entry that is not what this environment has installed."""
    path = lock_path(root)
    try:
        entries = read_lock(root)
    except LockError as exc:
        return [ConfigError(code=codes.PACKAGE_LOCK_MISMATCH, message=str(exc), file=str(path))]
    problems: list[ConfigError] = []
    for entry in entries.values():
        package = installed.get(entry.name)
        if package is None:
            message = f"{entry.name} {entry.version} is locked but not installed"
        elif package.version != entry.version or _norm(package.distribution) != _norm(
            entry.distribution
        ):
            message = (
                f"{entry.name} is locked at {entry.version} (distribution "
                f"{entry.distribution}) but {package.version} (distribution "
                f"{package.distribution}) is installed"
            )
        else:
            continue
        problems.append(
            ConfigError(
                code=codes.PACKAGE_LOCK_MISMATCH,
                message=message,
                file=display_path(path),
                line=entry.line or None,
                path=f"packages.{entry.name}",
                suggestion="run `goondan package install` to install what the lock says",
            )
        )
    return problems


def _norm(distribution: str) -> str:
    return distribution.lower().replace("_", "-").replace(".", "-")
