import os
import stat
from pathlib import Path

import pytest

from goondan.files import file_fsync_syncs_new_entries, file_system_type, replace_file
from goondan.paths import StorageError


def test_replace_file_makes_the_directory_and_leaves_no_temporary_file(tmp_path, fsynced):
    path = tmp_path / "new" / "state.json"
    replace_file(path, b"{}")
    replace_file(path, b'{"n":1}')
    assert path.read_bytes() == b'{"n":1}'
    assert os.listdir(path.parent) == ["state.json"]
    assert fsynced == []  # not durable: the OS has it, which a process crash cannot undo


def test_a_durable_replacement_syncs_the_file_before_the_rename_and_then_its_directory(
    tmp_path, fsynced
):
    path = tmp_path / "state.json"
    replace_file(path, b"{}", durable=True)
    assert fsynced == [str(tmp_path / "state.json.tmp"), str(tmp_path)]


def test_a_replaced_file_is_private_unless_a_mode_says_otherwise(tmp_path):
    private, shared = tmp_path / "journal.jsonl", tmp_path / "goondan.lock.yaml"
    replace_file(private, b"x")
    replace_file(shared, b"x", mode=0o644)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644 & ~_umask()


def test_a_failed_replacement_names_the_file_and_keeps_the_old_content(tmp_path, monkeypatch):
    path = tmp_path / "journal.jsonl"
    replace_file(path, b"old")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(StorageError) as failed:
        replace_file(path, b"new", durable=True, what="the journal")
    assert str(failed.value) == f"could not write the journal to {path}: No space left on device"
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["journal.jsonl"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _type_from_proc_mounts(path: Path) -> str:
    """The file system type of the longest mount point above `path`, from /proc/mounts."""
    best, kind = "", ""
    real = os.path.realpath(path)
    with open("/proc/mounts") as mounts:
        for line in mounts:
            _, point, fstype, *_ = line.split()
            point = point.replace("\\040", " ")
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fstype
    return kind


def test_the_file_system_type_is_the_mount_tables(tmp_path):
    assert file_system_type(tmp_path) == _type_from_proc_mounts(tmp_path)
    # Not there yet: the file system it would be made on.
    assert file_system_type(tmp_path / "not" / "yet") == file_system_type(tmp_path)
    assert file_fsync_syncs_new_entries(tmp_path) == (file_system_type(tmp_path) == "ext4")
    assert file_system_type(Path("/proc")) == "proc"
    assert not file_fsync_syncs_new_entries(Path("/proc"))
