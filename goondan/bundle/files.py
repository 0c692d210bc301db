"""Files a resource points at (`entry`, `prompt.systemRef`): inside the root, and present."""

from __future__ import annotations

import os
from pathlib import Path

from goondan.bundle import codes
from goondan.bundle.fields import Checker
from goondan.bundle.located import YPath, display_path


def check_file(chk: Checker, path: YPath, rel: str, root: Path, *, what: str, python: bool) -> bool:
    """`rel` must be relative, stay under `root` and name an existing file (a `.py` one for
    code entries). Reports and returns False otherwise."""
    where = display_path(root)
    if os.path.isabs(rel) or rel.startswith("~"):
        chk.error(
            path,
            f"{what} '{rel}' must be a path relative to the bundle root ({where})",
            "write it like './tools/calc.py'",
        )
        return False
    norm = os.path.normpath(rel)
    if norm == ".." or norm.startswith(".." + os.sep):
        chk.error(
            path,
            f"{what} '{rel}' points outside the bundle root ({where})",
            "keep the file inside the bundle directory; '..' may not leave it",
        )
        return False
    if python and not norm.endswith(".py"):
        chk.error(
            path,
            f"{what} '{rel}' must be a Python file (.py): goondan loads entries as Python modules",
            "point it at a .py file, e.g. './tools/calc.py'",
        )
        return False
    target = root / norm
    if not target.is_file():
        problem = "is a directory, not a file" if target.is_dir() else "does not exist"
        chk.error(
            path,
            f"{what} '{rel}' {problem} (looked for {display_path(target)})",
            f"create the file, or fix the path (relative to {where})",
            codes.ENTRY_NOT_FOUND,
        )
        return False
    return True


def check_text_file(chk: Checker, path: YPath, rel: str, root: Path, *, what: str) -> None:
    """A prompt file: as `check_file`, and readable as UTF-8 now rather than failing mid-run."""
    if not check_file(chk, path, rel, root, what=what, python=False):
        return
    try:
        (root / os.path.normpath(rel)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        chk.error(
            path,
            f"{what} '{rel}' cannot be read as UTF-8 text: {exc}",
            "save it as UTF-8 and check its permissions",
        )
