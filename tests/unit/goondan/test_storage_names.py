"""Instance keys map to directory names injectively (Hypothesis), as safe path components."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.paths import MAX_KEY_BYTES, BadInstanceKey, StatePaths, key_of, storage_name

keys = st.text(min_size=1, max_size=300).filter(
    lambda k: "\0" not in k and len(k.encode("utf-8", "surrogatepass")) <= MAX_KEY_BYTES
)


def assert_safe_component(name: str) -> None:
    assert name not in ("", ".", "..")
    assert "/" not in name and "\0" not in name
    assert len(name.encode()) <= 255


@settings(max_examples=500)
@given(keys, keys)
def test_distinct_keys_get_distinct_names(a, b):
    if a != b:
        assert storage_name(a) != storage_name(b)


@settings(max_examples=500)
@given(keys)
def test_a_name_is_one_safe_path_component_and_reads_back(key):
    name = storage_name(key)
    assert_safe_component(name)
    assert key_of(name) in (key, None)  # None: a hashed (long) name
    if len(name) < 100:
        assert key_of(name) == key


@pytest.mark.parametrize(
    "keys",
    [
        [".", "..", "-", "*", "ü/../ï", "default"],
        ["../../x", "x"],
        ["dup", "dup!"],
        ["alice", "alice!", "alice/.."],
        ["a" * 200, "a" * 201],
    ],
)
def test_the_keys_slug_merged_stay_apart(keys):
    names = [storage_name(k) for k in keys]
    assert len(set(names)) == len(keys)
    for name in names:
        assert_safe_component(name)


def test_keys_that_were_safe_keep_their_directory():
    for key in ("cli", "chat:42", "http:alice", "user_1", "a.b", "team-x"):
        assert storage_name(key) == key


@pytest.mark.parametrize("key", ["", "a\0b", "x" * (MAX_KEY_BYTES + 1)])
def test_a_key_that_cannot_be_stored_is_refused_with_a_clear_error(key):
    with pytest.raises(BadInstanceKey) as caught:
        storage_name(key)
    assert caught.value.code == "E_BAD_INSTANCE_KEY"
    assert "instance key" in str(caught.value)


def test_every_path_uses_the_mapping(tmp_path):
    paths = StatePaths.at(tmp_path)
    swarm = paths.swarm("s")
    assert swarm.instance_dir("dup!").name == "dup%21"
    assert swarm.conversation_dir("../../x", "a").parent.name == "%2E%2E%2F%2E%2E%2Fx"
    assert swarm.workdir("..").name == "%2E%2E"
    (swarm.instance_dir("dup!") / "a").mkdir(parents=True)
    assert paths.stored_swarms("dup!") == ["s"] and paths.stored_swarms("dup") == []
