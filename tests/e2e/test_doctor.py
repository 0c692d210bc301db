"""`goondan doctor` end to end: a clean pass on the quickstart, and each kind of problem found
(bad bundle, missing env var, unreachable endpoint, rejected key with --online, occupied
connector port, stale lock, a state root others can write to), never printing a value."""

import json
import os
import shutil
import socket
import threading

import pytest

from tests.e2e.conftest import QUICKSTART, REPO, goondan, write_bundle
from tests.fakes.anthropic_server import FakeAnthropicServerThread
from tests.fakes.google_server import FakeGoogleServerThread
from tests.fakes.openai_server import FakeOpenAIServerThread

MODEL_BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: llm}
spec:
  provider: %(provider)s
  model: m
  endpoint: %(endpoint)s
  apiKey: {valueFrom: {env: GD_DOC_KEY}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec: {modelConfig: {modelRef: Model/llm}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/helper, agents: [{ref: Agent/helper}]}
"""


def doctor(*args, state_root, env=None):
    clean = {k: v for k, v in os.environ.items() if k not in ("GD_DOC_KEY", "WEBHOOK_SECRET")}
    return goondan("doctor", *args, "--state-root", str(state_root), env={**clean, **(env or {})})


def lines(proc, status):
    return [line for line in proc.stdout.splitlines() if line.startswith(status)]


def model_bundle(tmp_path, endpoint, provider="openai", files=None):
    text = MODEL_BUNDLE % {"provider": provider, "endpoint": endpoint}
    if endpoint is None:
        text = text.replace("  endpoint: None\n", "")
    return write_bundle(tmp_path / "b", text, files)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_quickstart_passes(state_root):
    proc = doctor(str(QUICKSTART), state_root=state_root)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lines(proc, "fail") == []
    assert "bundle" in proc.stdout and "is valid" in proc.stdout
    assert "python-dotenv" in proc.stdout and "0 failed" in proc.stdout
    assert proc.stderr == ""


def test_json_output(state_root):
    proc = doctor(str(QUICKSTART), "--json", state_root=state_root)

    report = json.loads(proc.stdout)
    assert report["ok"] is True
    assert {"status", "area", "what", "fix"} <= set(report["checks"][0])
    assert {c["area"] for c in report["checks"]} >= {"python", "state root", "bundle", "daemon"}
    # Read from the doctor's own /proc/self/maps: linked statically, or from which libpython.
    build = [c for c in report["checks"] if c["what"].startswith("the interpreter ")]
    assert len(build) == 1 and build[0]["status"] in ("ok", "warn"), report["checks"]


def test_a_bad_bundle_fails(tmp_path, state_root):
    bundle = write_bundle(
        tmp_path / "b",
        """\
        apiVersion: goondan.ai/v1
        kind: Agent
        metadata: {name: helper}
        spec: {modelConfig: {modelRef: Model/missing}}
        """,
    )

    proc = doctor(str(bundle), state_root=state_root)

    assert proc.returncode == 1
    failed = lines(proc, "fail")
    assert any("bundle" in line and "Model/missing" in line for line in failed), proc.stdout
    assert "goondan validate" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


SCRIPTED_TOOL_BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: demo}
spec: {provider: scripted, model: scripted-v1}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: calc}
spec:
  entry: ./calc.py
  exports:
    - name: add
      description: Add.
      parameters: {type: object, properties: {}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec: {modelConfig: {modelRef: Model/demo}, tools: [{ref: Tool/calc}]}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/helper, agents: [{ref: Agent/helper}]}
"""


def test_a_tool_file_that_does_not_compile_fails_with_its_line(tmp_path, state_root):
    calc = 'def add(ctx, args):\n    return {"sum": 1\n\nhandlers = {"add": add}\n'
    bundle = write_bundle(tmp_path / "b", SCRIPTED_TOOL_BUNDLE, {"calc.py": calc})

    proc = doctor(str(bundle), state_root=state_root)

    assert proc.returncode == 1, proc.stdout
    failed = [line for line in lines(proc, "fail") if "bundle" in line]
    assert any("E_CONFIG_ENTRY_SYNTAX" in line and "calc.py:" in line for line in failed), (
        proc.stdout
    )
    assert "is valid" not in proc.stdout


def test_an_undeclared_handler_is_a_warning(tmp_path, state_root):
    calc = 'def add(ctx, args):\n    return 1\n\nhandlers = {"add": add, "sub": add}\n'
    bundle = write_bundle(tmp_path / "b", SCRIPTED_TOOL_BUNDLE, {"calc.py": calc})

    proc = doctor(str(bundle), state_root=state_root)

    assert proc.returncode == 0, proc.stdout
    assert any("E_CONFIG_HANDLER_UNDECLARED" in line for line in lines(proc, "warn")), proc.stdout
    assert "is valid" in proc.stdout


def test_a_missing_env_var_fails_and_a_set_one_says_where_from(tmp_path, state_root):
    with FakeOpenAIServerThread() as server:
        bundle = model_bundle(tmp_path, server.base_url)

        missing = doctor(str(bundle), state_root=state_root)
        (bundle / ".env.local").write_text("GD_DOC_KEY=sk-from-the-file\n")
        from_file = doctor(str(bundle), state_root=state_root)
        from_process = doctor(str(bundle), state_root=state_root, env={"GD_DOC_KEY": "sk-proc"})

    assert missing.returncode == 1
    assert any("GD_DOC_KEY is not set" in line for line in lines(missing, "fail")), missing.stdout
    assert from_file.returncode == 0, from_file.stdout
    assert f"GD_DOC_KEY is set ({bundle / '.env.local'})" in from_file.stdout
    assert "sk-from-the-file" not in from_file.stdout + from_file.stderr
    assert "GD_DOC_KEY is set (process environment)" in from_process.stdout
    assert "sk-proc" not in from_process.stdout + from_process.stderr


def test_a_missing_env_file_fails(tmp_path, state_root):
    proc = doctor(str(QUICKSTART), "--env-file", str(tmp_path / "nope.env"), state_root=state_root)

    assert proc.returncode == 1
    assert any(
        f"{tmp_path / 'nope.env'}: env file not found" in line for line in lines(proc, "fail")
    )


def test_an_unreachable_endpoint_fails(tmp_path, state_root):
    url = f"http://127.0.0.1:{free_port()}/v1"
    bundle = model_bundle(tmp_path, url)

    proc = doctor(str(bundle), state_root=state_root, env={"GD_DOC_KEY": "k"})

    assert proc.returncode == 1
    failed = lines(proc, "fail")
    assert any(
        url in line and "not reachable" in line and "Model.spec.endpoint" in line for line in failed
    )


def test_the_base_url_variable_is_reported_as_the_reason(tmp_path, state_root):
    with FakeOpenAIServerThread() as server:
        bundle = model_bundle(tmp_path, None)
        url = server.base_url
        proc = doctor(
            str(bundle), state_root=state_root, env={"GD_DOC_KEY": "k", "OPENAI_BASE_URL": url}
        )

    assert proc.returncode == 0, proc.stdout
    assert f"uses {url} (from $OPENAI_BASE_URL): reachable" in proc.stdout


def test_without_online_no_bytes_are_sent_to_the_endpoint(tmp_path, state_root):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received = []

    def accept():
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            received.append(conn.recv(4096))

    thread = threading.Thread(target=accept)
    thread.start()
    bundle = model_bundle(tmp_path, f"http://127.0.0.1:{port}/v1")
    proc = doctor(str(bundle), state_root=state_root, env={"GD_DOC_KEY": "sk-secret"})
    thread.join(10)
    listener.close()

    assert proc.returncode == 0, proc.stdout
    assert received == [b""]  # connected, then closed: no request, no key


@pytest.mark.parametrize(
    ("provider", "fake", "suffix", "status"),
    [
        ("openai", FakeOpenAIServerThread, "/v1", 401),
        ("anthropic", FakeAnthropicServerThread, "", 401),
        ("google", FakeGoogleServerThread, "", 400),  # Gemini: 400 "API key not valid"
    ],
)
def test_online_tells_an_accepted_key_from_a_rejected_one(
    tmp_path, state_root, provider, fake, suffix, status
):
    with fake(api_key="sk-right") as server:
        bundle = model_bundle(tmp_path, server.root_url + suffix, provider)
        right = doctor(
            str(bundle), "--online", state_root=state_root, env={"GD_DOC_KEY": "sk-right"}
        )
        wrong = doctor(
            str(bundle), "--online", state_root=state_root, env={"GD_DOC_KEY": "sk-wrong"}
        )

    assert right.returncode == 0, right.stdout
    assert "the API key was accepted" in right.stdout
    assert wrong.returncode == 1
    assert any(f"rejected (HTTP {status})" in line for line in lines(wrong, "fail")), wrong.stdout
    for proc in (right, wrong):
        assert "sk-right" not in proc.stdout and "sk-wrong" not in proc.stdout


def test_an_occupied_connector_port_fails(tmp_path, state_root):
    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        main = bundle / "goondan.yaml"
        main.write_text(
            main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}')
        )

        proc = doctor(str(bundle), state_root=state_root, env={"WEBHOOK_SECRET": "x"})
    free = doctor(str(bundle), state_root=state_root, env={"WEBHOOK_SECRET": "x"})

    assert proc.returncode == 1
    assert any(f"127.0.0.1:{port}" in line and "in use" in line for line in lines(proc, "fail")), (
        proc.stdout
    )
    assert free.returncode == 0, free.stdout
    assert f"127.0.0.1:{port} (config PORT): free" in free.stdout


def test_a_stale_lock_is_a_warning(state_root):
    run = state_root / "run"
    run.mkdir(mode=0o700)
    (run / "orchestrator.lock").write_text("999999")
    (run / "orchestrator.json").write_text("{}")

    proc = doctor(str(QUICKSTART), state_root=state_root)

    assert proc.returncode == 0, proc.stdout
    assert any("stale lock" in line and "999999" in line for line in lines(proc, "warn")), (
        proc.stdout
    )


def test_a_running_daemon_is_reported(start_daemon, state_root):
    daemon = start_daemon()

    proc = doctor(str(QUICKSTART), state_root=state_root)

    assert proc.returncode == 0, proc.stdout
    assert f"a daemon is running (pid {daemon.proc.pid})" in proc.stdout


def test_a_state_root_others_can_write_fails(state_root):
    os.chmod(state_root, 0o777)

    proc = doctor(str(QUICKSTART), state_root=state_root)

    assert proc.returncode == 1
    assert any("writable by group or others" in line for line in lines(proc, "fail")), proc.stdout
    assert f"chmod 700 {state_root}" in proc.stdout


def test_a_fallback_endpoint_is_checked_too(tmp_path, state_root):
    with FakeOpenAIServerThread() as server:
        dead = f"http://127.0.0.1:{free_port()}/v1"
        url = server.base_url
        bundle = model_bundle(tmp_path, url)
        main = bundle / "goondan.yaml"
        fallback = f"  options: {{fallbacks: [{{model: m2, endpoint: '{dead}'}}]}}\n"
        main.write_text(main.read_text().replace("  apiKey:", fallback + "  apiKey:"))

        proc = doctor(str(bundle), state_root=state_root, env={"GD_DOC_KEY": "k"})

    assert proc.returncode == 1
    failed = lines(proc, "fail")
    assert any("fallbacks[0]" in line and dead in line for line in failed), proc.stdout
    assert any(f"uses {url}" in line for line in lines(proc, "ok")), proc.stdout


def test_a_dependency_below_its_lower_bound_fails(tmp_path, state_root):
    # An older pyzmq's metadata first on the path: what `pip install pyzmq==25.0` would leave.
    info = tmp_path / "site" / "pyzmq-25.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pyzmq\nVersion: 25.0\n")

    proc = doctor(
        str(QUICKSTART), state_root=state_root, env={"PYTHONPATH": str(tmp_path / "site")}
    )

    assert proc.returncode == 1
    assert any("pyzmq 25.0 is older than 26.0" in line for line in lines(proc, "fail"))
    assert "pip install -U 'pyzmq>=26.0'" in proc.stdout
