import os

from agentproc.files import replace_file
from agentproc.instance import Instance


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


def test_with_fsync_durability_an_instance_saves_its_extension_state_durably(tmp_path, fsynced):
    directory = tmp_path / "k"
    instance = Instance("k", directory, fsync_events=True).load()
    instance.state.set("memory", {"facts": ["42"]})
    instance.end_turn()
    saved = directory / "extensions" / "memory.json"
    assert saved.read_bytes() == b'{"facts":["42"]}'
    assert fsynced == [str(saved) + ".tmp", str(saved.parent)]
