"""Conversation and runtime-event writes on a full disk (a real 3 MB tmpfs filled with `dd`):
the conversation raises `StorageError` and leaves no torn line; runtime events are dropped."""

from __future__ import annotations

import pytest

from agentproc.conversation import Conversation, read_messages
from agentproc.messages import Message
from agentproc.runtime_events import RuntimeEvent, RuntimeEventLog
from goondan.paths import StorageError
from tests.small_disk import fill, small_disk


def test_a_conversation_write_that_does_not_fit_raises_and_tears_nothing():
    with small_disk() as disk:
        convo = Conversation(disk / "i" / "a")
        convo.append(Message(id="1", role="user", content="hi"))
        filler = fill(disk)
        with pytest.raises(StorageError) as caught:
            convo.append(Message(id="2", role="assistant", content="x" * 64 * 1024))
        assert caught.value.code == "E_STORAGE"
        assert "conversation" in str(caught.value) and str(disk) in str(caught.value)
        assert convo.events_path.read_bytes().endswith(b"\n")
        assert [m.id for m in read_messages(disk / "i" / "a")] == ["1"]

        filler.unlink()  # space returns: the held event is written with the next one
        convo.append(Message(id="3", role="user", content="again"))
        convo.close()
        assert [m.id for m in read_messages(disk / "i" / "a")] == ["1", "2", "3"]


def test_runtime_events_on_a_full_disk_are_dropped_not_raised():
    with small_disk() as disk:
        log = RuntimeEventLog(disk / "agents" / "a")
        event = RuntimeEvent("turn.failed", "t", "a", "k", "0" * 32, "0" * 16, data={})
        log.emit(event)
        filler = fill(disk)
        big = RuntimeEvent(
            "turn.failed", "t", "a", "k", "0" * 32, "0" * 16, data={"x": "y" * 65536}
        )
        log.emit(big)  # written at once (turn.failed): must not raise
        log.emit(big)
        assert log.path.read_bytes().count(b"\n") == 1
        assert log.path.read_bytes().endswith(b"\n")
        filler.unlink()
        log.emit(event)
        log.close()
        assert log.path.read_bytes().count(b"\n") == 2


def test_extension_state_that_does_not_fit_raises_and_keeps_the_old_state():
    from agentproc.extension_state import ExtensionStateStore

    with small_disk() as disk:
        store = ExtensionStateStore(disk / "state")
        store.set("memo", {"n": 1})
        store.save()
        filler = fill(disk)
        store.set("memo", {"n": 2, "pad": "x" * 64 * 1024})
        with pytest.raises(StorageError) as caught:
            store.save()
        assert caught.value.code == "E_STORAGE" and "memo.json" in str(caught.value)
        assert ExtensionStateStore(disk / "state").get("memo") == {"n": 1}
        assert sorted(p.name for p in store.directory.iterdir()) == ["memo.json"]  # no .tmp
        filler.unlink()
        store.save()  # still pending: written once space returns
        saved = ExtensionStateStore(disk / "state").get("memo")
        assert saved is not None and saved["n"] == 2
