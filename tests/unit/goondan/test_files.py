import os
import stat
import tempfile
from pathlib import Path

import pytest

from goondan.files import (
    file_fsync_syncs_new_entries,
    file_system_type,
    place_new_directories_apart,
    replace_file,
    skips_recently_freed_inodes,
)
from goondan.paths import StorageError
from tests.file_flags import lsattr


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


def _journaled_elsewhere(path: Path) -> bool | None:
    """Read apart from the code under test: the mount table's device for `path`, and jbd2's
    list of the journals it runs (`/proc/fs/jbd2/<device>-<inode>`); None if not on ext4."""
    if file_system_type(path) != "ext4":
        return None
    wanted = os.stat(path).st_dev
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            major, minor = fields[2].split(":")
            if os.makedev(int(major), int(minor)) == wanted:
                device = os.path.basename(fields[fields.index("-", 6) + 2])
                return any(j.startswith(f"{device}-") for j in os.listdir("/proc/fs/jbd2"))
    raise AssertionError(f"{path} is on no mount")


def test_ext4_without_a_journal_is_told_apart_from_other_file_systems(tmp_path):
    journaled = _journaled_elsewhere(tmp_path)
    assert skips_recently_freed_inodes(tmp_path) == (journaled is False)
    assert not skips_recently_freed_inodes(Path("/dev/shm"))  # tmpfs
    assert not skips_recently_freed_inodes(Path("/proc"))


def test_where_recently_freed_inodes_are_skipped_new_directories_are_placed_apart(tmp_path):
    spares = tmp_path / "spares"
    spares.mkdir()
    asked = place_new_directories_apart(spares)
    assert asked == skips_recently_freed_inodes(tmp_path)
    assert place_new_directories_apart(spares) == asked  # again, as every agent start asks
    (spares / "c1").mkdir()  # directories are still made in it
    if file_system_type(tmp_path) == "ext4":
        assert ("T" in lsattr(spares)) == asked  # this project's CI: ext4 without a journal
        assert "T" not in lsattr(spares / "c1")  # the parent's alone, not passed on


def test_where_the_file_system_has_no_such_trouble_nothing_is_asked_and_nothing_fails(tmp_path):
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        assert not place_new_directories_apart(Path(shm))
        (Path(shm) / "c1").mkdir()
    assert not place_new_directories_apart(tmp_path / "not-there")
