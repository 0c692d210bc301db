"""The workdir sandbox of file-system and bash: every path a call names must stay inside.

A path is resolved against `ctx.workdir`, then made real (symlinks followed, `..` applied, for
every component that exists); the result must be the workdir or below it, or below a directory
of GOONDAN_FS_ALLOW_PATHS, unless GOONDAN_FS_ALLOW_OUTSIDE_WORKDIR is on. The caller then works
on the real path, so a symlink inside the workdir cannot lead the operation elsewhere.

Not covered: a symlink swapped in between the check and the operation by another process (the
agent's own bash, say). The sandbox keeps honest mistakes and prompt-injected paths in; it is not
an OS-level jail.
"""

from __future__ import annotations

import os
from pathlib import Path

from base_tools._policy import FS_ALLOW_OUTSIDE_WORKDIR, FS_ALLOW_PATHS, fs_policy
from goondan import ErrorCode, ToolError


class OutsideWorkdirError(ToolError):
    code = ErrorCode.E_PATH_OUTSIDE_WORKDIR


def resolve_path(workdir: Path, raw: str, *, what: str = "path") -> Path:
    """The real absolute path of `raw` (relative to `workdir`), if the sandbox allows it."""
    if "\x00" in raw:
        raise ToolError(
            f"{what} must not contain NUL characters", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    root = Path(os.path.realpath(workdir))
    real = Path(os.path.realpath(os.path.join(root, raw)))
    if _inside(real, root):
        return real
    policy = fs_policy()
    if policy.allow_outside or any(_inside(real, extra) for extra in policy.extra_roots):
        return real
    raise OutsideWorkdirError(
        f"{what} {raw!r} resolves to {real}, outside the working directory {root}",
        suggestion="use a path inside the working directory (relative paths start there); "
        f"the operator can allow more with {FS_ALLOW_PATHS} or {FS_ALLOW_OUTSIDE_WORKDIR}=1",
    )


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
