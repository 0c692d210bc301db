"""A full disk under a real daemon (state root on a 3 MB tmpfs filled with `dd`): an input that
cannot be journaled is answered `E_STORAGE` at once, and once space returns an input accepted
before an orchestrator kill is answered after the restart."""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess

from agentproc.conversation import read_messages
from goondan.paths import storage_name
from orchestrator.journal import _decoder
from tests.e2e.conftest import GOONDAN, REPO, Daemon, solo_bundle, wait_for, write_bundle
from tests.e2e.test_delegation import BUNDLE, SLOW_TOOL
from tests.small_disk import fill, small_disk


def test_a_full_disk_answers_e_storage_and_loses_nothing_accepted(tmp_path):
    bundle = write_bundle(tmp_path / "b", BUNDLE, {"slow.py": SLOW_TOOL})
    with small_disk() as root:
        daemons: list[Daemon] = []
        try:
            daemon = Daemon(bundle, root)
            daemons.append(daemon)
            workdir = root / "swarms/default/workspaces/cli"
            workdir.mkdir(parents=True)
            (workdir / "delay").write_text("0")
            assert daemon.send("warm up", "--agent", "sleeper").returncode == 0

            (workdir / "delay").write_text("30")
            sender = subprocess.Popen(
                [*GOONDAN, "send", "work please", "--agent", "sleeper", "--state-root", str(root)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            wait_for(lambda: (workdir / "attempts").exists(), timeout=15)  # accepted, running

            filler = fill(root)
            # Larger than what is left of the journal file's last page.
            refused = daemon.send("no room " + "x" * 20_000, "--agent", "sleeper")
            assert refused.returncode == 1, refused.stderr
            assert "E_STORAGE" in refused.stderr
            assert "journal" in refused.stderr and str(root / "run") in refused.stderr
            journal = root / "run/journal.jsonl"
            for line in journal.read_bytes().splitlines():
                _decoder.decode(line)  # no torn line left behind

            daemon.proc.kill()  # SIGKILL: the accepted input is only in the journal now
            daemon.proc.wait()
            sender.communicate(timeout=10)
            filler.unlink()  # space returns
            (workdir / "delay").write_text("0")
            daemons.append(Daemon(bundle, root))
            convo = root / "swarms/default/instances/cli/sleeper"

            def answered() -> bool:
                messages = read_messages(convo)
                return bool(messages) and messages[-1].content == "attempt E_TOOL_INTERRUPTED"

            wait_for(answered, timeout=15)
            assert "delivering unanswered inputs from the journal" in daemons[-1].logs()
            # the refused input was never accepted, so it is not replayed
            assert not any("no room" in str(m.content) for m in read_messages(convo))
        finally:
            for each in daemons:
                each.stop()


def test_keys_slug_merged_keep_separate_conversations(start_daemon, state_root, tmp_path):
    daemon = start_daemon(solo_bundle(tmp_path / "b"))
    for key, text in (("dup", "first"), ("dup!", "second"), ("..", "third")):
        proc = daemon.send(text, "--instance", key)
        assert proc.returncode == 0, proc.stderr
    instances = state_root / "swarms/default/instances"
    assert sorted(p.name for p in instances.iterdir()) == ["%2E%2E", "dup", "dup%21"]
    for name, text in (("dup", "first"), ("dup%21", "second"), ("%2E%2E", "third")):
        contents = [m.content for m in read_messages(instances / name / "solo")]
        assert contents and all(text in str(c) for c in contents), (name, contents)

    listed = json.loads(daemon.cli("instance", "list", "--json").stdout)
    assert sorted(row["instanceKey"] for row in listed) == ["..", "dup", "dup!"]
    deleted = daemon.cli("instance", "delete", "dup!")
    assert deleted.returncode == 0, deleted.stderr
    assert sorted(p.name for p in instances.iterdir()) == ["%2E%2E", "dup"]

    refused = daemon.send("nowhere", "--instance", "a\x01" + "b" * 2000)
    assert refused.returncode == 1 and "E_BAD_INSTANCE_KEY" in refused.stderr, refused.stderr


def test_webhook_callers_keep_their_own_conversations_and_hear_e_storage(tmp_path):
    from tests.e2e.test_connectors import SECRET, free_port, post

    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    port = free_port()
    main = bundle / "goondan.yaml"
    main.write_text(main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}'))
    with small_disk() as root:
        daemon = Daemon(bundle, root, env={"WEBHOOK_SECRET": SECRET})
        try:

            def listening() -> bool:
                with socket.socket() as sock:
                    return sock.connect_ex(("127.0.0.1", port)) == 0

            wait_for(listening, timeout=20)
            instances = root / "swarms/default/instances"
            for caller in ("alice", "alice!", "alice/.."):
                status, body = post(
                    port, {"text": f"from {caller}", "properties": {"caller": caller}}
                )
                assert status == 202 and body["instanceKey"] == f"http:{caller}", body
                convo = instances / storage_name(f"http:{caller}") / "responder"
                wait_for(functools.partial(read_messages, convo))
            for caller in ("alice", "alice!", "alice/.."):
                convo = instances / storage_name(f"http:{caller}") / "responder"
                contents = [str(m.content) for m in read_messages(convo)]
                assert all(c.endswith(f"from {caller}") for c in contents), contents

            filler = fill(root)
            status, body = post(port, {"text": "no room " + "x" * 20_000})
            assert status == 422 and body["error"]["code"] == "E_STORAGE", body
            assert "journal" in body["error"]["message"]
            filler.unlink()
            status, body = post(port, {"text": "room again", "properties": {"caller": "bob"}})
            assert status == 202, body
        finally:
            daemon.stop()


def test_a_conversation_the_disk_cannot_hold_fails_its_turn_with_e_storage(
    start_daemon, state_root, tmp_path
):
    daemon = start_daemon(solo_bundle(tmp_path / "b"))
    assert daemon.send("hello", "--instance", "roomy").returncode == 0
    pid = daemon.process("solo")["pid"]
    with small_disk(at=state_root / "swarms/default/instances/full") as disk:
        filler = fill(disk)
        failed = daemon.send("hello", "--instance", "full")
        assert failed.returncode == 1, failed.stderr
        assert "E_STORAGE" in failed.stderr and "conversation" in failed.stderr
        assert str(disk) in failed.stderr
        # The agent answered and kept serving: no crash, other instances unaffected.
        assert daemon.process("solo")["pid"] == pid
        assert daemon.send("again", "--instance", "roomy").returncode == 0

        filler.unlink()  # space returns: the instance works again
        ok = daemon.send("hello again", "--instance", "full")
        assert ok.returncode == 0, ok.stderr
        contents = [str(m.content) for m in read_messages(disk / "solo")]
        assert contents and "hello again" in contents[-1] and daemon.process("solo")["pid"] == pid


def test_a_replay_that_cannot_be_stored_is_delivered_again_once_it_can(tmp_path, state_root):
    """After a restart, nobody waits for a journaled input's answer: one that fails because
    its conversation cannot be written (here the file is made immutable, which even root
    cannot write) stays journaled and is delivered again until it is answered."""
    bundle = write_bundle(tmp_path / "b", BUNDLE, {"slow.py": SLOW_TOOL})
    daemons: list[Daemon] = []
    events = state_root / "swarms/default/instances/cli/sleeper+events.jsonl"
    try:
        daemons.append(Daemon(bundle, state_root))
        workdir = state_root / "swarms/default/workspaces/cli"
        workdir.mkdir(parents=True)
        (workdir / "delay").write_text("30")
        sender = subprocess.Popen(
            [
                *GOONDAN,
                "send",
                "work please",
                "--agent",
                "sleeper",
                "--state-root",
                str(state_root),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: (workdir / "attempts").exists(), timeout=15)  # accepted, running
        daemons[0].proc.kill()  # the input is only in the journal now
        daemons[0].proc.wait()
        sender.communicate(timeout=10)

        subprocess.run(["chattr", "+i", str(events)], check=True)
        daemons.append(Daemon(bundle, state_root))
        wait_for(lambda: "journaled input failed; delivering it again" in daemons[-1].logs())
        assert "E_STORAGE" in daemons[-1].logs()
        subprocess.run(["chattr", "-i", str(events)], check=True)

        def answered() -> bool:
            messages = read_messages(events.parent / "sleeper")
            return bool(messages) and messages[-1].content == "attempt E_TOOL_INTERRUPTED"

        wait_for(answered, timeout=20)
        wait_for(lambda: '"journaled input answered"' in daemons[-1].logs())
        journal = state_root / "run/journal.jsonl"
        daemons[-1].stop()
        reopened = [_decoder.decode(line) for line in journal.read_bytes().splitlines()]
        accepted = {e.id for e in reopened if e.op == "accept"}
        assert accepted <= {e.id for e in reopened if e.op == "done"}  # settled, once
    finally:
        subprocess.run(["chattr", "-i", str(events)], check=False)
        for each in daemons:
            each.stop()
