"""`goondan validate [PATH] [--format text|json] [--env-file FILE]... [--no-import]`: load the
bundle and its env files, import its Python entries in a throwaway process
(`goondan.bundle.probe`), check goondan.lock.yaml against the installed packages, and report
every problem."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from goondan.bundle import PROBE_TIMEOUT_S, BundleInvalid, ConfigError, load_bundle, probe_entries
from goondan.bundle.loader import base_range_warnings
from goondan.bundle.lockfile import lock_problems
from goondan.bundle.model import LOCAL_SCOPE
from goondan.bundle.packages import installed_packages
from goondan.envfiles import EnvFileError, EnvFiles

_JSON_FIELDS = ("code", "message", "file", "line", "path", "suggestion")


def run_validate(
    path: str,
    fmt: str,
    out: TextIO,
    env_files: Sequence[str] = (),
    *,
    deep: bool = True,
    import_timeout_s: float = PROBE_TIMEOUT_S,
) -> int:
    """Print the verdict on `out` in `fmt` ("text" or "json"); 0 when valid, 1 when not.
    The env files are read (a missing `--env-file` or a malformed line is an error) and
    applied, for what the bundle's loading and its entries' imports may read from the
    environment. Warnings are printed and never fail. `deep=False` skips importing the
    entries."""
    problems: list[ConfigError] = []
    try:
        EnvFiles(path, env_files).load()
    except EnvFileError as exc:
        problems.extend(exc.errors)
    bundle = None
    try:
        bundle = load_bundle(path)
    except BundleInvalid as exc:
        problems.extend(exc.errors)
    else:
        problems.extend(base_range_warnings(bundle))
        if deep:
            problems.extend(probe_entries(bundle, import_timeout_s))
    root = Path(path) if Path(path).is_dir() else Path(path).parent
    problems.extend(lock_problems(root, installed_packages()))
    errors = [p for p in problems if p.severity != "warning"]
    warnings = [p for p in problems if p.severity == "warning"]
    if fmt == "json":
        report = {
            "valid": not errors,
            "errors": [_as_json(e) for e in errors],
            "warnings": [_as_json(w) for w in warnings],
        }
        out.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
        return 1 if errors else 0
    for error in errors:
        out.write(error.render() + "\n")
    for warning in warnings:
        out.write(f"warning: {warning.render()}\n")
    warned = f"; {_count(len(warnings), 'warning')}" if warnings else ""
    if errors:
        out.write(f"✗ {path}: {_count(len(errors), 'error')}{warned}\n")
    elif bundle is not None:
        own = sum(1 for r in bundle.resources if r.package == LOCAL_SCOPE)
        out.write(f"✓ {path} is valid ({_count(own, 'resource')}{warned})\n")
    return 1 if errors else 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _as_json(error: ConfigError) -> dict[str, object]:
    return {field: getattr(error, field) for field in _JSON_FIELDS}
