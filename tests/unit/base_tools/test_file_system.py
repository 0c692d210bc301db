"""file-system: read, write, list, mkdir inside the workdir, and the sandbox around it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from base_tools.file_system import handlers
from goondan import ToolContext, ToolError

read, write, list_entries, mkdir = (handlers[n] for n in ("read", "write", "list", "mkdir"))


def test_write_then_read_round_trip(ctx: ToolContext, workdir: Path) -> None:
    out = write(ctx, {"path": "notes/today.txt", "content": "héllo\n"})
    target = workdir.resolve() / "notes" / "today.txt"
    assert out == {
        "path": str(target),
        "size": len("héllo\n".encode()),
        "written": True,
        "append": False,
    }
    assert read(ctx, {"path": "notes/today.txt"}) == {
        "path": str(target),
        "size": 7,
        "truncated": False,
        "content": "héllo\n",
    }


def test_append_adds_to_the_file(ctx: ToolContext) -> None:
    write(ctx, {"path": "log.txt", "content": "a\n"})
    out = write(ctx, {"path": "log.txt", "content": "b\n", "append": True})
    assert out["append"] is True and out["size"] == 4
    assert read(ctx, {"path": "log.txt"})["content"] == "a\nb\n"


def test_read_truncates_at_max_bytes_without_splitting_a_character(ctx: ToolContext) -> None:
    write(ctx, {"path": "big.txt", "content": "ab한글"})  # 2 + 3 + 3 bytes
    out = read(ctx, {"path": "big.txt", "maxBytes": 4})
    assert out == {"path": out["path"], "size": 8, "truncated": True, "content": "ab"}
    assert read(ctx, {"path": "big.txt", "maxBytes": 5})["content"] == "ab한"


def test_read_absolute_path_inside_the_workdir(ctx: ToolContext, workdir: Path) -> None:
    write(ctx, {"path": "a.txt", "content": "x"})
    assert read(ctx, {"path": str(workdir / "a.txt")})["content"] == "x"


@pytest.mark.parametrize(
    "args, code",
    [
        ({"path": "missing.txt"}, "E_NOT_FOUND"),
        ({"path": "."}, "E_IS_DIRECTORY"),
        ({"path": "a.txt", "maxBytes": 0}, "E_TOOL_INVALID_ARGS"),
    ],
)
def test_read_errors(ctx: ToolContext, args: dict[str, Any], code: str) -> None:
    write(ctx, {"path": "a.txt", "content": "x"})
    with pytest.raises(ToolError) as info:
        read(ctx, args)
    assert info.value.code == code


def test_write_onto_a_directory_is_refused(ctx: ToolContext) -> None:
    mkdir(ctx, {"path": "dir"})
    with pytest.raises(ToolError) as info:
        write(ctx, {"path": "dir", "content": "x"})
    assert info.value.code == "E_IS_DIRECTORY"


def test_write_under_a_file_is_an_io_error(ctx: ToolContext) -> None:
    write(ctx, {"path": "file", "content": "x"})
    with pytest.raises(ToolError) as info:
        write(ctx, {"path": "file/child.txt", "content": "x"})
    assert info.value.code in {"E_IO", "E_EXISTS", "E_NOT_FOUND"}
    assert "'file/child.txt'" in str(info.value)


def test_list_sorted_with_types_and_sizes(ctx: ToolContext, workdir: Path) -> None:
    write(ctx, {"path": "b.txt", "content": "123"})
    write(ctx, {"path": "src/main.py", "content": "print()"})
    root = workdir.resolve()
    out = list_entries(ctx, {})
    assert out == {
        "path": str(root),
        "recursive": False,
        "count": 2,
        "entries": [
            {"name": "b.txt", "path": str(root / "b.txt"), "type": "file", "size": 3},
            {"name": "src", "path": str(root / "src"), "type": "dir"},
        ],
    }
    deep = list_entries(ctx, {"path": ".", "recursive": True, "includeDirs": False})
    assert [e["name"] for e in deep["entries"]] == ["b.txt", "main.py"]
    dirs = list_entries(ctx, {"recursive": True, "includeFiles": False})
    assert [e["type"] for e in dirs["entries"]] == ["dir"]


def test_list_shows_symlinks_without_following_them(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    mkdir(ctx, {"path": "."})
    (workdir / "escape").symlink_to(outside, target_is_directory=True)
    out = list_entries(ctx, {"recursive": True})
    assert [(e["name"], e["type"]) for e in out["entries"]] == [("escape", "symlink")]


@pytest.mark.parametrize(
    "args, code",
    [
        ({"path": "nope"}, "E_NOT_FOUND"),
        ({"path": "f.txt"}, "E_NOT_A_DIRECTORY"),
    ],
)
def test_list_errors(ctx: ToolContext, args: dict[str, Any], code: str) -> None:
    write(ctx, {"path": "f.txt", "content": "x"})
    with pytest.raises(ToolError) as info:
        list_entries(ctx, args)
    assert info.value.code == code


def test_mkdir_recursive_and_not(ctx: ToolContext, workdir: Path) -> None:
    out = mkdir(ctx, {"path": "a/b/c"})
    assert out == {"path": str(workdir.resolve() / "a/b/c"), "created": True, "recursive": True}
    assert mkdir(ctx, {"path": "a/b/c"})["created"] is False  # already there: fine
    with pytest.raises(ToolError) as missing_parent:
        mkdir(ctx, {"path": "x/y", "recursive": False})
    assert missing_parent.value.code == "E_NOT_FOUND"
    with pytest.raises(ToolError) as exists:
        mkdir(ctx, {"path": "a", "recursive": False})
    assert exists.value.code == "E_EXISTS"


# --- the sandbox ---------------------------------------------------------------------------------


def _escapes(workdir: Path, outside: Path) -> dict[str, str]:
    """Ways out of the workdir, each naming the file outside/secret.txt."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "to-outside").symlink_to(outside, target_is_directory=True)
    (workdir / "to-secret").symlink_to(outside / "secret.txt")
    return {
        "dotdot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "symlinked file": "to-secret",
        "symlinked parent dir": "to-outside/secret.txt",
        "dotdot after a subdir": "sub/../../outside/secret.txt",
    }


ESCAPES = ["dotdot", "absolute", "symlinked file", "symlinked parent dir", "dotdot after a subdir"]


@pytest.mark.parametrize("escape", ESCAPES)
def test_escapes_are_refused_by_default(
    ctx: ToolContext, workdir: Path, outside: Path, escape: str
) -> None:
    path = _escapes(workdir, outside)[escape]
    for call, args in (
        (read, {"path": path}),
        (write, {"path": path, "content": "pwned"}),
        (list_entries, {"path": os.path.dirname(path) or "."}),
        (mkdir, {"path": path if escape == "symlinked file" else path + ".d"}),
    ):
        if call is list_entries and escape == "symlinked file":
            continue  # its directory is the workdir itself
        with pytest.raises(ToolError) as info:
            call(ctx, args)
        assert info.value.code == "E_PATH_OUTSIDE_WORKDIR", (escape, call.__name__)
        assert "outside the working directory" in str(info.value)
        assert "GOONDAN_FS_ALLOW" in (info.value.suggestion or "")
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.mark.parametrize("escape", ESCAPES)
def test_escapes_are_allowed_when_configured(
    ctx: ToolContext, workdir: Path, outside: Path, escape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _escapes(workdir, outside)[escape]
    monkeypatch.setenv("GOONDAN_FS_ALLOW_PATHS", str(outside))
    assert read(ctx, {"path": path})["content"] == "top secret\n"
    assert read(ctx, {"path": path})["path"] == str(outside.resolve() / "secret.txt")


def test_symlink_to_etc_refused_then_allowed(
    ctx: ToolContext, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir.mkdir(parents=True)
    (workdir / "etc").symlink_to("/etc", target_is_directory=True)
    for path in ("etc/passwd", "/etc/passwd"):
        with pytest.raises(ToolError) as info:
            read(ctx, {"path": path})
        assert info.value.code == "E_PATH_OUTSIDE_WORKDIR"
    monkeypatch.setenv("GOONDAN_FS_ALLOW_OUTSIDE_WORKDIR", "1")
    assert "root:" in read(ctx, {"path": "etc/passwd"})["content"]
    assert "root:" in read(ctx, {"path": "/etc/passwd"})["content"]


def test_a_dangling_symlink_cannot_create_a_file_outside(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    workdir.mkdir(parents=True)
    (workdir / "trap").symlink_to(outside / "created-by-agent.txt")
    with pytest.raises(ToolError) as info:
        write(ctx, {"path": "trap", "content": "x"})
    assert info.value.code == "E_PATH_OUTSIDE_WORKDIR"
    assert not (outside / "created-by-agent.txt").exists()


def test_symlinks_that_stay_inside_are_fine(ctx: ToolContext, workdir: Path) -> None:
    write(ctx, {"path": "real/data.txt", "content": "ok"})
    (workdir / "alias").symlink_to(workdir / "real", target_is_directory=True)
    assert read(ctx, {"path": "alias/data.txt"})["content"] == "ok"


def test_allow_paths_does_not_allow_a_sibling_with_the_same_prefix(
    ctx: ToolContext, tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sibling = tmp_path / "outside-but-not-really"
    sibling.mkdir()
    (sibling / "x.txt").write_text("x")
    monkeypatch.setenv("GOONDAN_FS_ALLOW_PATHS", str(outside))
    with pytest.raises(ToolError):
        read(ctx, {"path": str(sibling / "x.txt")})


@pytest.mark.parametrize(
    "name, value",
    [
        ("GOONDAN_FS_ALLOW_OUTSIDE_WORKDIR", "maybe"),
        ("GOONDAN_FS_ALLOW_PATHS", "relative/dir"),
    ],
)
def test_malformed_settings_fail_closed(
    ctx: ToolContext, outside: Path, name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ToolError) as info:
        read(ctx, {"path": str(outside / "secret.txt")})
    assert info.value.code == "E_TOOL_POLICY" and name in str(info.value)
