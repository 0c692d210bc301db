"""Env files: precedence, interpolation, errors with file:line, and a re-read that never
overrides the process environment."""

import pytest

from goondan.envfiles import EnvFileError, EnvFiles, read_layer


def bundle_with(tmp_path, dotenv=None, local=None):
    (tmp_path / "goondan.yaml").write_text("")
    if dotenv is not None:
        (tmp_path / ".env").write_text(dotenv)
    if local is not None:
        (tmp_path / ".env.local").write_text(local)
    return tmp_path


def test_later_files_win_and_origin_names_the_file(tmp_path):
    bundle = bundle_with(tmp_path, "A=1\nB=1\nC=1\n", "B=2\nC=2\n")
    extra = tmp_path / "x.env"
    extra.write_text("C=3\n")

    layer = read_layer(bundle, [str(extra)], {})

    assert layer.values == {"A": "1", "B": "2", "C": "3"}
    assert layer.origin["A"] == str(bundle / ".env")
    assert layer.origin["C"] == str(extra)


def test_a_goondan_yaml_path_finds_the_same_files(tmp_path):
    bundle = bundle_with(tmp_path, "A=1\n")
    assert read_layer(bundle / "goondan.yaml", (), {}).values == {"A": "1"}


def test_interpolation_prefers_the_process_environment(tmp_path):
    bundle = bundle_with(tmp_path, "HOST=file\nURL=http://${HOST}:${PORT:-80}/\n")
    assert read_layer(bundle, (), {"HOST": "proc"}).values["URL"] == "http://proc:80/"


def test_errors_name_file_and_line_never_the_text(tmp_path):
    bundle = bundle_with(tmp_path, "A=1\nsecret words here\n")
    with pytest.raises(EnvFileError) as caught:
        read_layer(bundle, [str(tmp_path / "missing.env")], {})
    text = str(caught.value)
    assert f"{bundle / '.env'}:2:" in text
    assert f"{tmp_path / 'missing.env'}: env file not found" in text
    assert "secret" not in text


def test_apply_keeps_the_process_environment_and_reapply_updates_and_unsets(tmp_path):
    bundle = bundle_with(tmp_path, "A=file\nB=file\nC=file\n")
    environ = {"A": "process"}
    env = EnvFiles(bundle, (), environ)

    assert env.load() == ["B", "C"]
    assert environ == {"A": "process", "B": "file", "C": "file"}
    assert env.source_of("A") == "process environment"
    assert env.source_of("B") == str(bundle / ".env")

    (bundle / ".env").write_text("A=new\nB=new\n")
    assert env.load() == ["B", "C"]
    assert environ == {"A": "process", "B": "new"}

    environ["B"] = "set-later-by-hand"  # now the process's own: a re-read leaves it alone
    (bundle / ".env").write_text("B=newer\n")
    assert env.load() == []
    assert environ == {"A": "process", "B": "set-later-by-hand"}
