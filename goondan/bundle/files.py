"""Files a resource points at (`entry`, `prompt.systemRef`): inside the root (symlinks
followed), present, regular and of a bounded size."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from goondan.bundle import codes
from goondan.bundle.fields import Checker
from goondan.bundle.located import YPath, display_path
from goondan.bundle.reading import file_type, read_regular_file


def inside_root(target: Path, root: Path) -> Path | None:
    """Where `target` really is, following symlinks, if that is under `root` (also resolved);
    else None."""
    real = target.resolve()
    return real if real.is_relative_to(root.resolve()) else None


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
    if not target.exists():
        chk.error(
            path,
            f"{what} '{rel}' does not exist (looked for {display_path(target)})",
            f"create the file, or fix the path (relative to {where})",
            codes.ENTRY_NOT_FOUND,
        )
        return False
    real = inside_root(target, root)
    if real is None:
        chk.error(
            path,
            f"{what} '{rel}' is a symlink to {target.resolve()}, outside the bundle root ({where})",
            "copy the file into the bundle; links may not leave it",
            codes.PATH_OUTSIDE_BUNDLE,
        )
        return False
    mode = real.stat().st_mode
    if not stat.S_ISREG(mode):
        chk.error(
            path,
            f"{what} '{rel}' is {file_type(mode)}, not a regular file "
            f"(looked for {display_path(target)})",
            "point it at an ordinary file",
            codes.NOT_A_REGULAR_FILE,
        )
        return False
    size = real.stat().st_size
    if size > codes.MAX_ENTRY_BYTES:
        chk.error(
            path,
            f"{what} '{rel}' is {size:,} bytes; a bundle file may be at most "
            f"{codes.MAX_ENTRY_BYTES:,}",
            "split it, or keep large data outside the bundle and read it at run time",
            codes.FILE_TOO_LARGE,
        )
        return False
    return True


def check_text_file(chk: Checker, path: YPath, rel: str, root: Path, *, what: str) -> None:
    """A prompt file: as `check_file`, and readable as UTF-8 now rather than failing mid-run."""
    if not check_file(chk, path, rel, root, what=what, python=False):
        return
    try:
        read_regular_file(root / os.path.normpath(rel), codes.MAX_ENTRY_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        chk.error(
            path,
            f"{what} '{rel}' cannot be read as UTF-8 text: {exc}",
            "save it as UTF-8 and check its permissions",
        )
