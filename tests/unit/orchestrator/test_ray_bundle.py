"""How a Ray-placed agent gets its bundle: packed by the orchestrator (`pack_bundle`), unpacked
once per node and content by the actor (`unpacked_bundle`). No Ray needed for either."""

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from agentproc.ray_actor import unpacked_bundle
from orchestrator.ray_bundle import BundleTooLarge, pack_bundle


def test_the_archive_holds_what_agents_read_and_nothing_of_this_machine(tmp_path):
    bundle = tmp_path / "b"
    (bundle / "tools").mkdir(parents=True)
    (bundle / "goondan.yaml").write_text("kind: Swarm\n")
    (bundle / "tools" / "calc.py").write_text("handlers = {}\n")
    (bundle / "data.json").write_text("{}")
    for left_out in (".venv/bin", ".git", "tools/__pycache__", "state/run"):
        (bundle / left_out).mkdir(parents=True)
        (bundle / left_out / "x").write_text("not shipped")
    (bundle / "agents.sock").write_text("")
    shared = tmp_path / "shared-tools"  # a directory linked in, as the agents see it
    shared.mkdir()
    (shared / "search.py").write_text("handlers = {}\n")
    (bundle / "more").symlink_to(shared)
    (shared / "loop").symlink_to(bundle)  # a link back up is followed once, not forever
    names = zipfile.ZipFile(io.BytesIO(pack_bundle(bundle, bundle / "state"))).namelist()
    assert names == ["data.json", "goondan.yaml", "more/search.py", "tools/calc.py"]


def test_what_the_bundles_gitignore_leaves_out_stays_here(tmp_path):
    """As Ray's working_dir did: a `.gitignore` (or `.rayignore`), at the top or deeper, keeps
    its files off the nodes: an `.env` with keys, a data set, a tool's local secrets."""
    bundle = tmp_path / "b"
    (bundle / "tools").mkdir(parents=True)
    (bundle / "big").mkdir()
    (bundle / "goondan.yaml").write_text("kind: Swarm\n")
    (bundle / ".gitignore").write_text(".env\nbig/\n*.log\n")
    (bundle / ".env").write_text("OPENAI_API_KEY=sk-secret\n")
    (bundle / "run.log").write_text("")
    (bundle / "big" / "corpus.txt").write_text("x")
    (bundle / "tools" / ".rayignore").write_text("keys.py\n")
    (bundle / "tools" / "keys.py").write_text("KEY = 1\n")
    (bundle / "tools" / "calc.py").write_text("handlers = {}\n")
    (bundle / "zz").mkdir()  # walked after `tools/`, whose ignore file is not its
    (bundle / "zz" / "keys.py").write_text("KEY = 2\n")
    names = zipfile.ZipFile(io.BytesIO(pack_bundle(bundle, tmp_path / "state"))).namelist()
    assert names == [
        ".gitignore",
        "goondan.yaml",
        "tools/.rayignore",
        "tools/calc.py",
        "zz/keys.py",
    ]
    # The same files give the same archive: a reload that changed nothing ships nothing new.
    assert pack_bundle(bundle, bundle / "state") == pack_bundle(bundle, bundle / "state")


def _pack(bundle: Path, version: int, state: Path) -> tuple[str, bytes]:
    (bundle / "goondan.yaml").write_text(f"version: {version}\n")
    archive = pack_bundle(bundle, state)
    return hashlib.sha256(archive).hexdigest(), archive


def test_a_node_unpacks_each_bundle_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "server.sh").write_text("#!/bin/sh\n")  # an MCP server's command, say
    (bundle / "server.sh").chmod(0o755)
    digest, archive = _pack(bundle, 1, tmp_path / "state")
    first = unpacked_bundle(digest, archive)
    assert (first.path / "goondan.yaml").read_text() == "version: 1\n"
    assert (first.path / "server.sh").stat().st_mode & 0o777 == 0o755
    (first.path / "goondan.yaml").write_text("changed on the node")
    again = unpacked_bundle(digest, archive)
    assert again.path == first.path  # not unpacked again
    assert (first.path / "goondan.yaml").read_text() == "changed on the node"
    second = unpacked_bundle(*_pack(bundle, 2, tmp_path / "state"))  # a reload's new bundle
    assert second.path != first.path
    assert (second.path / "goondan.yaml").read_text() == "version: 2\n"
    assert first.path.is_dir()  # actors still run from it


def test_a_new_bundle_removes_the_old_ones_no_actor_runs_from(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    bundle = tmp_path / "b"
    bundle.mkdir()
    one = unpacked_bundle(*_pack(bundle, 1, tmp_path / "state"))
    two = unpacked_bundle(*_pack(bundle, 2, tmp_path / "state"))
    root = one.path.parent
    (root / "0123abcd").mkdir()  # an older build's bundle, no lock file beside it
    (root / f"{two.path.name}.x1y2").mkdir()  # what a crashed unpacking of it left
    one.close()  # its last actor ended; two's still runs
    three = unpacked_bundle(*_pack(bundle, 3, tmp_path / "state"))
    left = sorted(p.name for p in root.iterdir())
    assert left == sorted(
        [two.path.name, f"{two.path.name}.lock", f"{two.path.name}.x1y2"]
        + [three.path.name, f"{three.path.name}.lock"]
    )
    two.close()
    again = unpacked_bundle(*_pack(bundle, 1, tmp_path / "state"))  # unpacked anew
    assert (again.path / "goondan.yaml").read_text() == "version: 1\n"
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [again.path.name, f"{again.path.name}.lock", three.path.name, f"{three.path.name}.lock"]
    )


def test_a_node_runs_no_bundle_from_a_directory_others_can_write(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import os
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    shared = tmp_path / f"goondan-bundles-{os.getuid()}"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # as another user could have made it, waiting for our digest
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text("version: 1\n")
    archive = pack_bundle(bundle, tmp_path / "state")
    with pytest.raises(PermissionError, match="not this user's alone"):
        unpacked_bundle(hashlib.sha256(archive).hexdigest(), archive)


def test_a_bundle_too_large_to_send_says_which_files_to_leave_out(tmp_path):
    bundle = tmp_path / "b"
    (bundle / "data").mkdir(parents=True)
    (bundle / "goondan.yaml").write_text("kind: Swarm\n")
    (bundle / "data" / "corpus.bin").write_bytes(b"x" * 3 * 1024 * 1024)
    with pytest.raises(BundleTooLarge) as raised:
        pack_bundle(bundle, tmp_path / "state", limit=2 * 1024 * 1024)
    assert "more than 2 MiB of files to send to the Ray nodes" in str(raised.value)
    assert "the largest: data/corpus.bin 3 MiB" in str(raised.value)
    assert ".gitignore or .rayignore" in str(raised.value)
    (bundle / ".rayignore").write_text("data/\n")  # as the message says
    assert pack_bundle(bundle, tmp_path / "state", limit=2 * 1024 * 1024)
