"""`file-system` tool of @goondan/base: read, write, list and mkdir inside the workdir sandbox."""

from __future__ import annotations

import codecs
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from base_tools._workspace import resolve_path
from goondan import ErrorCode, ToolContext, ToolError

DEFAULT_READ_BYTES = 100_000
MAX_LIST_ENTRIES = 10_000  # a recursive list of a huge tree would flood the LLM's context


def read(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = resolve_path(ctx.workdir, args["path"])
    max_bytes = int(args.get("maxBytes", DEFAULT_READ_BYTES))
    if max_bytes <= 0:
        raise ToolError("maxBytes must be greater than 0", code=ErrorCode.E_TOOL_INVALID_ARGS)
    _require_file(path, args["path"])
    with _opening(args["path"]):
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(max_bytes)
    truncated = size > len(data)
    # A cut in the middle of a UTF-8 sequence drops that partial character instead of mangling it.
    content = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=not truncated)
    return {"path": str(path), "size": size, "truncated": truncated, "content": content}


def write(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = resolve_path(ctx.workdir, args["path"])
    append = bool(args.get("append", False))
    if path.is_dir():
        raise ToolError(
            f"{args['path']!r} is a directory",
            code=ErrorCode.E_IS_DIRECTORY,
            suggestion="write to a file path inside it",
        )
    with _opening(args["path"]):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab" if append else "wb") as handle:
            handle.write(args["content"].encode("utf-8"))
        size = path.stat().st_size
    return {"path": str(path), "size": size, "written": True, "append": append}


def list_entries(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    raw = args.get("path", ".")
    root = resolve_path(ctx.workdir, raw)
    recursive = bool(args.get("recursive", False))
    include_dirs = bool(args.get("includeDirs", True))
    include_files = bool(args.get("includeFiles", True))
    if not root.exists():
        raise ToolError(f"directory {raw!r} does not exist", code=ErrorCode.E_NOT_FOUND)
    if not root.is_dir():
        raise ToolError(
            f"{raw!r} is not a directory",
            code=ErrorCode.E_NOT_A_DIRECTORY,
            suggestion="use file-system__read for files",
        )
    entries: list[dict[str, Any]] = []
    with _opening(raw):
        for entry in _walk(root, recursive):
            kind = _kind(entry)
            if (kind == "dir" and not include_dirs) or (kind != "dir" and not include_files):
                continue
            item: dict[str, Any] = {"name": entry.name, "path": entry.path, "type": kind}
            if kind == "file":
                item["size"] = entry.stat(follow_symlinks=False).st_size
            entries.append(item)
            if len(entries) >= MAX_LIST_ENTRIES:
                break
    entries.sort(key=lambda item: item["path"])
    result: dict[str, Any] = {
        "path": str(root),
        "recursive": recursive,
        "count": len(entries),
        "entries": entries,
    }
    if len(entries) >= MAX_LIST_ENTRIES:
        result["limited"] = True
    return result


def mkdir(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = resolve_path(ctx.workdir, args["path"])
    recursive = bool(args.get("recursive", True))
    existed = path.is_dir()
    with _opening(args["path"]):
        if recursive:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.mkdir()
    return {"path": str(path), "created": not existed, "recursive": recursive}


def _walk(root: Path, recursive: bool) -> Iterator[os.DirEntry[str]]:
    """Entries under `root`; symlinked directories are listed but never descended into."""
    pending = [root]
    while pending:
        with os.scandir(pending.pop()) as scan:
            for entry in scan:
                yield entry
                if recursive and entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    return "dir" if entry.is_dir(follow_symlinks=False) else "file"


def _require_file(path: Path, raw: str) -> None:
    if not path.exists():
        raise ToolError(
            f"file {raw!r} does not exist",
            code=ErrorCode.E_NOT_FOUND,
            suggestion="check the path with file-system__list",
        )
    if path.is_dir():
        raise ToolError(
            f"{raw!r} is a directory",
            code=ErrorCode.E_IS_DIRECTORY,
            suggestion="use file-system__list for directories",
        )


@contextlib.contextmanager
def _opening(raw: str) -> Iterator[None]:
    """Turns OS errors into tool errors that name the path the LLM gave."""
    try:
        yield
    except FileExistsError:
        raise ToolError(f"{raw!r} already exists", code=ErrorCode.E_EXISTS) from None
    except FileNotFoundError:
        raise ToolError(
            f"{raw!r}: a parent directory does not exist",
            code=ErrorCode.E_NOT_FOUND,
            suggestion="create it first, or use recursive: true",
        ) from None
    except PermissionError:
        raise ToolError(f"{raw!r}: permission denied", code=ErrorCode.E_PERMISSION) from None
    except OSError as exc:
        raise ToolError(f"{raw!r}: {exc.strerror or exc}", code=ErrorCode.E_IO) from None


handlers = {"read": read, "write": write, "list": list_entries, "mkdir": mkdir}
