"""`goondan validate [PATH] [--format text|json] [--env-file FILE]...`: load the bundle and its
env files and report every problem."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TextIO

from goondan.bundle import BundleInvalid, ConfigError, load_bundle
from goondan.bundle.model import LOCAL_SCOPE
from goondan.envfiles import EnvFileError, EnvFiles

_JSON_FIELDS = ("code", "message", "file", "line", "path", "suggestion")


def run_validate(path: str, fmt: str, out: TextIO, env_files: Sequence[str] = ()) -> int:
    """Print the verdict on `out` in `fmt` ("text" or "json"); 0 when valid, 1 when not.
    The env files are read (a missing `--env-file` or a malformed line is an error) and
    applied, for what the bundle's loading may read from the environment."""
    errors: list[ConfigError] = []
    try:
        EnvFiles(path, env_files).load()
    except EnvFileError as exc:
        errors.extend(exc.errors)
    try:
        bundle = load_bundle(path)
    except BundleInvalid as exc:
        errors.extend(exc.errors)
    if fmt == "json":
        report = {"valid": not errors, "errors": [_as_json(e) for e in errors]}
        out.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    elif errors:
        for error in errors:
            out.write(error.render() + "\n")
        count = len(errors)
        out.write(f"✗ {path}: {count} error{'s' if count != 1 else ''}\n")
    else:
        own = sum(1 for r in bundle.resources if r.package == LOCAL_SCOPE)
        out.write(f"✓ {path} is valid ({own} resource{'s' if own != 1 else ''})\n")
    return 1 if errors else 0


def _as_json(error: ConfigError) -> dict[str, object]:
    return {field: getattr(error, field) for field in _JSON_FIELDS}
