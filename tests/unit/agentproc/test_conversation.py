import json
import signal
import subprocess
import sys

from agentproc.conversation import Conversation, read_messages
from agentproc.messages import Message, ToolCall
from goondan.paths import conversation_stored, delete_conversation, stored_agents


def test_events_survive_without_a_fold(tmp_path):
    convo = Conversation(tmp_path / "a")
    convo.load()
    convo.append(Message(id="1", role="user", content="hi"))
    convo.append(Message(id="2", role="assistant", content="hello"))
    # no fold: as if the process were killed here
    again = Conversation(tmp_path / "a")
    assert [m.content for m in again.load()] == ["hi", "hello"]
    # the reloaded conversation goes on where it was
    again.append(Message(id="3", role="user", content="more"))
    assert [m.content for m in Conversation(tmp_path / "a").load()] == ["hi", "hello", "more"]


def test_sync_keeps_the_events_and_clears_dirty(tmp_path):
    convo = Conversation(tmp_path / "a")
    convo.load()
    convo.append(Message(id="1", role="user", content="hi"))
    assert convo.dirty
    convo.sync()
    assert not convo.dirty
    assert [m.content for m in Conversation(tmp_path / "a").load()] == ["hi"]


def test_fold_rewrites_base_and_clears_events(tmp_path):
    convo = Conversation(tmp_path / "a")
    convo.load()
    convo.append(Message(id="1", role="user", content="a"))
    convo.fold()
    convo.append(Message(id="2", role="user", content="b"))
    convo.fold()
    assert (tmp_path / "a+events.jsonl").read_bytes() == b""
    assert [
        json.loads(line)["id"] for line in (tmp_path / "a+base.jsonl").read_text().splitlines()
    ] == ["1", "2"]


def test_a_torn_last_event_is_ignored(tmp_path):
    convo = Conversation(tmp_path / "a")
    convo.load()
    convo.append(Message(id="1", role="user", content="kept"))
    with open(tmp_path / "a+events.jsonl", "ab") as f:
        f.write(b'{"op":"append","message":{"id":"2","ro')
    again = Conversation(tmp_path / "a")
    assert [m.id for m in again.load()] == ["1"]
    # the torn line is cut, so what comes next is readable after another restart
    again.append(Message(id="3", role="assistant", content="after"))
    assert [m.id for m in Conversation(tmp_path / "a").load()] == ["1", "3"]


def test_unanswered_tool_calls_get_an_interrupted_result(tmp_path):
    convo = Conversation(tmp_path / "a")
    convo.load()
    convo.append(Message(id="1", role="user", content="go"))
    calls = (ToolCall("c1", "slow__run", "{}"), ToolCall("c2", "fast__run", "{}"))
    convo.append(Message(id="2", role="assistant", tool_calls=calls))
    convo.append(
        Message(id="3", role="tool", tool_call_id="c2", content='{"status":"ok","output":1}')
    )
    loaded = Conversation(tmp_path / "a").load()
    assert [m.role for m in loaded] == ["user", "assistant", "tool", "tool"]
    assert [m.tool_call_id for m in loaded[2:]] == ["c1", "c2"]  # in the order of the calls
    assert json.loads(loaded[2].content or "")["error"]["code"] == "E_TOOL_INTERRUPTED"
    # the repair is on disk
    assert len(Conversation(tmp_path / "a").load()) == 4


def test_request_positions_follow_appends_and_edits(tmp_path):
    convo = Conversation(tmp_path / "a")
    convo.load()
    convo.append(Message(id="1", role="user", content="a", metadata={"requestId": "r1"}))
    convo.append(Message(id="2", role="assistant", content="done"))
    assert convo.request_position("r1") == 0
    convo.append(Message(id="3", role="user", content="b", metadata={"requestId": "r2"}))
    assert convo.request_position("r2") == 2  # indexed as it was appended
    assert convo.remove("1")
    assert convo.request_position("r2") == 1 and convo.request_position("r1") is None
    convo.truncate()
    assert convo.request_position("r2") is None
    # a fresh process finds requests of the stored conversation
    convo.append(Message(id="4", role="user", content="c", metadata={"requestId": "r3"}))
    reloaded = Conversation(tmp_path / "a")
    reloaded.load()
    assert reloaded.request_position("r3") == 0


def test_a_new_conversation_is_one_file_made_with_its_first_event(tmp_path):
    key = tmp_path / "instances" / "k"  # no level of it exists yet
    directory = key / "agent"
    convo = Conversation(directory)
    assert not convo.stored()
    convo.append(Message(id="1", role="user", content="held"), hold=True)
    assert not key.exists()  # nothing written: nothing made
    convo.append(Message(id="2", role="assistant", content="hello"))
    convo.sync()
    # one file beside the instance's directory, which is not made
    assert sorted(p.name for p in key.iterdir()) == ["agent+events.jsonl"]
    again = Conversation(directory)
    assert again.stored()
    assert [m.content for m in again.load()] == ["held", "hello"]
    assert [m.content for m in read_messages(directory)] == ["held", "hello"]
    # another agent's conversation of the same instance finds the key's directory made
    sibling = Conversation(key / "other")
    sibling.append(Message(id="1", role="user", content="hi"))
    assert [m.content for m in Conversation(sibling.directory).load()] == ["hi"]
    assert [p.name for p in stored_agents(key)] == ["agent", "other"]
    assert delete_conversation(directory)
    assert not delete_conversation(directory)
    assert [p.name for p in stored_agents(key)] == ["other"]


def test_a_conversation_of_the_older_layout_is_read_and_written_where_it_is(tmp_path, fsynced):
    """Before `<agent>+events.jsonl`, a conversation was `base.jsonl` and `events.jsonl` in
    the instance's directory: it loads from there, and its new events go there too."""
    key = tmp_path / "instances" / "k"
    directory = key / "agent"
    directory.mkdir(parents=True)
    old = Conversation(tmp_path / "scratch" / "x")  # writes the older layout's lines
    old.append(Message(id="1", role="user", content="a"))
    old.append(Message(id="2", role="assistant", content="b"))
    old.fold()
    old.append(Message(id="3", role="user", content="c"))
    (tmp_path / "scratch" / "x+base.jsonl").rename(directory / "base.jsonl")
    (tmp_path / "scratch" / "x+events.jsonl").rename(directory / "events.jsonl")
    assert conversation_stored(directory)
    assert [m.id for m in read_messages(directory)] == ["1", "2", "3"]
    assert [p.name for p in stored_agents(key)] == ["agent"]
    convo = Conversation(directory, fsync_events=True)
    assert convo.stored()
    assert [m.id for m in convo.load()] == ["1", "2", "3"]
    fsynced.clear()
    convo.append(Message(id="4", role="assistant", content="d"))
    events = str(directory / "events.jsonl")
    assert fsynced == [events, str(directory), str(key), str(key.parent)]
    convo.fold()
    assert sorted(p.name for p in key.iterdir()) == ["agent"]  # nothing beside it
    assert [m.id for m in Conversation(directory).load()] == ["1", "2", "3", "4"]
    assert delete_conversation(directory)
    assert not key.joinpath("agent").exists()


# The fold, killed at the moment its new base has replaced the old one but before the events
# are emptied (an audit hook sends SIGKILL at the first file opened after the rename).
FOLD_KILLED_AFTER_RENAME = """
import os, signal, sys
from pathlib import Path
from agentproc.conversation import Conversation
from agentproc.messages import Message

convo = Conversation(Path(sys.argv[1]))
convo.load()
convo.append(Message(id="1", role="user", content="a"))
convo.append(Message(id="2", role="assistant", content="b"))
renamed = False

def kill_after_rename(event, args):
    global renamed
    if event == "os.rename" and str(args[1]).endswith("base.jsonl"):
        renamed = True
    elif renamed and event == "open":
        os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(kill_after_rename)
convo.fold()
"""


def test_a_fold_killed_after_its_rename_replays_nothing_twice(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", FOLD_KILLED_AFTER_RENAME, str(tmp_path / "a")], capture_output=True
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    # the crash left the new base and the events it already holds
    assert (tmp_path / "a+base.jsonl").read_text().count("\n") == 2
    assert (tmp_path / "a+events.jsonl").read_bytes()
    assert [m.id for m in read_messages(tmp_path / "a")] == ["1", "2"]
    again = Conversation(tmp_path / "a")
    assert [m.id for m in again.load()] == ["1", "2"]
    again.append(Message(id="3", role="user", content="c"))
    again.fold()
    assert [m.id for m in Conversation(tmp_path / "a").load()] == ["1", "2", "3"]


def test_a_marker_of_another_base_is_not_taken_for_this_one(tmp_path):
    """A fold killed before its rename: the old base stands, and every event still counts."""
    convo = Conversation(tmp_path / "a")
    convo.load()
    convo.append(Message(id="1", role="user", content="a"))
    convo.fold()
    convo.append(Message(id="2", role="user", content="b"))
    with open(tmp_path / "a+events.jsonl", "ab") as events:  # a marker for a base never renamed
        events.write(b'{"op":"folded","base_bytes":99,"base_crc":1}\n')
    convo.append(Message(id="3", role="user", content="c"))
    assert [m.id for m in Conversation(tmp_path / "a").load()] == ["1", "2", "3"]


def test_with_fsync_every_write_and_a_new_conversations_entries_are_durable_before_it_returns(
    tmp_path, fsynced
):
    instances = tmp_path / "instances"
    directory = instances / "k" / "agent"
    convo = Conversation(directory, fsync_events=True)
    convo.append(Message(id="1", role="user", content="hi"))
    events = str(directory.parent / "agent+events.jsonl")
    assert fsynced == [events, str(directory.parent), str(instances)]
    fsynced.clear()
    convo.append(Message(id="2", role="assistant", content="hello"))
    assert fsynced == [events]  # the directories once


def test_where_a_files_fsync_syncs_its_new_entries_a_new_conversation_fsyncs_only_its_file(
    tmp_path, fsynced
):
    """On ext4 the fsync of a file just created or renamed into a directory, and held open,
    makes its entries durable too: a conversation this process made syncs its file alone. One
    it found on disk, or where the file system does not, syncs its directories as well."""
    instances = tmp_path / "instances"
    directory = instances / "k" / "agent"
    events = str(directory.parent / "agent+events.jsonl")
    made = Conversation(directory, fsync_syncs_new_entries=True)
    assert made.load() == []  # nothing stored: the file is made here
    made.append(Message(id="1", role="user", content="hi"))
    made.sync()
    assert fsynced == [events]
    made.close()

    fsynced.clear()
    found = Conversation(directory, fsync_syncs_new_entries=True)
    found.load()
    found.append(Message(id="2", role="assistant", content="hello"))
    found.sync()
    assert fsynced == [events, str(directory.parent), str(instances)]

    fsynced.clear()
    elsewhere = Conversation(instances / "k2" / "agent")
    elsewhere.append(Message(id="1", role="user", content="hi"))
    elsewhere.sync()
    assert fsynced == [events.replace("/k/", "/k2/"), str(instances / "k2"), str(instances)]


def test_with_fsync_every_write_a_new_conversation_fsyncs_its_file_where_that_is_enough(
    tmp_path, fsynced
):
    directory = tmp_path / "instances" / "k" / "agent"
    convo = Conversation(directory, fsync_events=True, fsync_syncs_new_entries=True, new=True)
    convo.append(Message(id="1", role="user", content="hi"))
    assert fsynced == [str(directory.parent / "agent+events.jsonl")]
