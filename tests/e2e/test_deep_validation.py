"""Deep validation: `goondan validate` and every reload import the bundle's Python entries in a
throwaway process, report what fails with its file:line, and refuse a broken reload."""

import json
import shutil
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import GOONDAN, QUICKSTART, goondan, pid_alive, wait_for, write_bundle

HEADER = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: solo}
spec:
  modelConfig: {modelRef: Model/m}
  tools: [{ref: Tool/calc}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/solo, agents: [{ref: Agent/solo}]}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: calc}
spec:
  entry: ./tools/calc.py
  exports:
    - {name: add, description: Add., parameters: {type: object}}
    - {name: negate, description: Negate., parameters: {type: object}}
"""

CALC = """\
def add(ctx, args):
    return {"sum": args["a"] + args["b"]}


def negate(ctx, args):
    return {"value": -args["x"]}


handlers = {"add": add, "negate": negate}
"""


def validate(bundle, *args):
    return goondan("validate", str(bundle), *args)


def calc_bundle(tmp_path, calc=CALC, extra="", files=None):
    return write_bundle(tmp_path / "b", HEADER + extra, {"tools/calc.py": calc, **(files or {})})


def test_a_sound_bundle_is_valid(tmp_path):
    proc = validate(calc_bundle(tmp_path))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.endswith("is valid (4 resources)\n")


def test_a_syntax_error_is_reported_with_its_file_and_line(tmp_path):
    calc = CALC.replace('return {"value": -args["x"]}', 'return {"value": -args["x"]')
    bundle = calc_bundle(tmp_path, calc)
    proc = validate(bundle)
    assert proc.returncode == 1
    assert "tools/calc.py:6: Tool/calc: import failed: SyntaxError:" in proc.stdout
    assert "(E_CONFIG_ENTRY_SYNTAX)" in proc.stdout and "Traceback" not in proc.stdout
    assert proc.stdout.endswith(": 1 error\n")
    # The same bundle passes when the entries are not imported.
    skipped = validate(bundle, "--no-import")
    assert skipped.returncode == 0 and "is valid" in skipped.stdout


def test_an_exception_at_import_names_the_line_that_raised(tmp_path):
    calc = "import os\n\n\ndef token():\n    return os.environ['DEEPVAL_UNSET_TOKEN']\n\n\n"
    calc += "TOKEN = token()\n" + CALC
    proc = validate(calc_bundle(tmp_path, calc))
    assert proc.returncode == 1
    # The deepest frame in the user's file: inside token(), not the call at line 8.
    assert "tools/calc.py:5: Tool/calc: import failed: KeyError: 'DEEPVAL_UNSET_TOKEN'" in (
        proc.stdout
    )
    assert "(E_CONFIG_ENTRY_IMPORT)" in proc.stdout


def test_an_error_in_a_module_the_entry_imports_points_at_that_module(tmp_path):
    calc = "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent))\n"
    calc += "import helper\n" + CALC
    helper = "X = 1\nY = 1 / 0\n"
    proc = validate(calc_bundle(tmp_path, calc, files={"tools/helper.py": helper}))
    assert proc.returncode == 1
    assert "tools/helper.py:2: Tool/calc: importing " in proc.stdout
    assert "ZeroDivisionError" in proc.stdout


def test_missing_handler_is_an_error_and_undeclared_one_a_warning(tmp_path):
    calc = CALC.replace('"negate": negate}', '"neg": negate}')
    proc = validate(calc_bundle(tmp_path, calc))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert any(
        line.endswith(
            "tools/calc.py: Tool/calc: export 'negate' has no handler (E_CONFIG_HANDLER_MISSING)"
        )
        for line in lines
    ), proc.stdout
    assert any(
        line.startswith("warning: ") and "handler 'neg' is not a declared export" in line
        for line in lines
    ), proc.stdout
    assert lines[-1].endswith(": 1 error; 1 warning")

    report = json.loads(validate(calc_bundle(tmp_path, calc), "--format", "json").stdout)
    assert report["valid"] is False
    assert [e["code"] for e in report["errors"]] == ["E_CONFIG_HANDLER_MISSING"]
    assert [w["code"] for w in report["warnings"]] == ["E_CONFIG_HANDLER_UNDECLARED"]
    assert set(report["errors"][0]) == {"code", "message", "file", "line", "path", "suggestion"}


def test_an_undeclared_handler_alone_does_not_fail(tmp_path):
    calc = CALC + "\nhandlers['extra'] = add\n"
    proc = validate(calc_bundle(tmp_path, calc))
    assert proc.returncode == 0, proc.stdout
    assert "warning: " in proc.stdout and "handler 'extra'" in proc.stdout
    assert proc.stdout.endswith("is valid (4 resources; 1 warning)\n")


def test_a_tool_without_handlers_dict(tmp_path):
    proc = validate(calc_bundle(tmp_path, "def add(ctx, args):\n    return 1\n"))
    assert proc.returncode == 1
    assert "must define `handlers`" in proc.stdout and "E_CONFIG_HANDLER_MISSING" in proc.stdout


CONNECTOR_AND_EXTENSION = """\
---
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: stamp}
spec: {entry: ./ext.py}
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: feed}
spec:
  entry: ./feed.py
  events: [{name: message}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: feed}
spec:
  connectorRef: Connector/feed
  ingress: {rules: [{route: {}}]}
"""


def test_an_extension_without_register_and_a_connector_without_main(tmp_path):
    files = {
        "ext.py": "def setup(api, config):\n    pass\n",
        "feed.py": "def main(ctx):\n    pass\n",
    }
    proc = validate(calc_bundle(tmp_path, extra=CONNECTOR_AND_EXTENSION, files=files))
    assert proc.returncode == 1, proc.stdout
    assert "ext.py: Extension/stamp: defines no `register` function " in proc.stdout
    assert "(E_CONFIG_EXTENSION_NO_REGISTER)" in proc.stdout
    assert "feed.py: Connector/feed: defines a `main` that is not `async` " in proc.stdout
    assert "(E_CONFIG_CONNECTOR_NO_MAIN)" in proc.stdout
    assert proc.stdout.endswith(": 2 errors\n")

    files = {
        "ext.py": "def register(api, config):\n    pass\n",
        "feed.py": "async def main(ctx):\n    pass\n",
    }
    proc = validate(calc_bundle(tmp_path, extra=CONNECTOR_AND_EXTENSION, files=files))
    assert proc.returncode == 0, proc.stdout


def test_a_hanging_import_times_out_and_leaves_nothing_running(tmp_path):
    pid_file = tmp_path / "child.pid"
    calc = (
        "import subprocess, time\n"
        f"child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('noise on stdout')\n"
        "time.sleep(300)\n" + CALC
    )
    started = time.monotonic()
    proc = validate(calc_bundle(tmp_path, calc), "--import-timeout", "2", "--format", "json")
    assert time.monotonic() - started < 20
    assert proc.returncode == 1
    (error,) = json.loads(proc.stdout)["errors"]  # the print did not reach our stdout
    assert error["code"] == "E_CONFIG_ENTRY_TIMEOUT"
    assert error["file"].endswith("tools/calc.py") and error["path"] == "Tool/calc"
    assert "did not finish within 2 s" in error["message"]
    # What the import started was killed with it.
    wait_for(lambda: not pid_alive(int(pid_file.read_text())), timeout=5)


def test_a_process_an_import_leaves_behind_neither_delays_nor_outlives_validate(tmp_path):
    pid_file = tmp_path / "child.pid"
    calc = (
        "import subprocess\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n" + CALC
    )
    started = time.monotonic()
    proc = validate(calc_bundle(tmp_path, calc), "--import-timeout", "30")
    assert proc.returncode == 0, proc.stdout
    assert time.monotonic() - started < 15  # not the time limit: it did not wait for `sleep`
    wait_for(lambda: not pid_alive(int(pid_file.read_text())), timeout=5)


def test_an_entry_that_exits_at_import(tmp_path):
    proc = validate(calc_bundle(tmp_path, "import os\nos._exit(3)\n"))
    assert proc.returncode == 1
    assert "tools/calc.py: Tool/calc: the import ended the probe process (exit status 3)" in (
        proc.stdout
    )
    assert "(E_CONFIG_ENTRY_IMPORT)" in proc.stdout


# -- reloads -------------------------------------------------------------------------------


@pytest.fixture
def quickstart(tmp_path):
    return shutil.copytree(QUICKSTART, tmp_path / "quickstart")


def pids(daemon):
    return {p["name"]: p["pid"] for p in daemon.status()["processes"]}


def test_a_reload_of_a_broken_tool_file_is_refused(start_daemon, quickstart):
    daemon = start_daemon(quickstart)
    assert "3 is a prime" in daemon.send("What is 1 plus 2?").stdout
    before = pids(daemon)
    numbers = quickstart / "tools" / "numbers.py"
    numbers.write_text(numbers.read_text() + "\ndef broken(:\n")
    line = len(numbers.read_text().splitlines())
    proc = daemon.cli("restart")
    assert proc.returncode == 1
    assert "restart refused" in proc.stderr
    assert f"tools/numbers.py:{line}: Tool/numbers: import failed: SyntaxError" in proc.stderr
    assert "Traceback" not in proc.stderr
    # The swarm runs on as it was, old code and all.
    assert pids(daemon) == before
    assert "7 is a prime" in daemon.send("What is 3 plus 4?").stdout
    assert "reload refused: the bundle does not validate" in daemon.logs()


def test_watch_refuses_a_broken_file_and_takes_the_fixed_one(start_daemon, quickstart):
    daemon = start_daemon(quickstart, "--watch")
    daemon.send("What is 1 plus 2?")
    before = pids(daemon)
    numbers = quickstart / "tools" / "numbers.py"
    good = numbers.read_text()
    numbers.write_text(good.replace('"a prime"', '"prime"') + "\nhandlers = (\n")
    wait_for(lambda: "reload refused" in daemon.logs(), timeout=20)
    assert "tools/numbers.py:" in daemon.logs() and "E_CONFIG_ENTRY_SYNTAX" in daemon.logs()
    assert pids(daemon) == before
    assert "7 is a prime" in daemon.send("What is 3 plus 4?").stdout
    numbers.write_text(good.replace('"a prime"', '"prime"'))
    wait_for(lambda: '"restarted": ["researcher"]' in daemon.logs(), timeout=20)
    assert "7 is prime" in daemon.send("What is 3 plus 4?").stdout
    assert pids(daemon)["assistant"] == before["assistant"]


EXTENSION_SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: ma}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "version"
        steps:
          - call: stamp__version
            args: {}
          - reply: "{{result.v}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: mb}
spec: {provider: scripted, model: s, options: {default: "b here"}}
---
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: stamp}
spec:
  entry: ./ext.py
  config: {tag: red}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/ma}
  extensions: [{ref: Extension/stamp}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: b}
spec:
  modelConfig: {modelRef: Model/mb}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/a, agents: [{ref: Agent/a}, {ref: Agent/b}]}
"""

EXTENSION = """\
VERSION = "v1"


def register(api, config):
    def version(ctx, args):
        return {"v": VERSION + "-" + config["tag"]}

    api.tools.register(
        {"name": "stamp__version", "description": "the version", "parameters": {"type": "object"}},
        version,
    )
"""


def test_an_extension_change_restarts_only_the_agents_that_use_it(start_daemon, tmp_path):
    bundle = write_bundle(tmp_path / "ext", EXTENSION_SWARM, {"ext.py": EXTENSION})
    daemon = start_daemon(bundle)
    assert daemon.send("version?").stdout.strip() == "v1-red"
    assert daemon.send("hi", "--agent", "b").stdout.strip() == "b here"
    before = pids(daemon)

    ext = bundle / "ext.py"
    ext.write_text(EXTENSION.replace('"v1"', '"v2"'))
    proc = daemon.cli("restart")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "reloaded; restarted: a"
    assert daemon.send("version?").stdout.strip() == "v2-red"
    after = pids(daemon)
    assert after["a"] != before["a"] and after["b"] == before["b"]

    # The Extension resource's config is part of it too.
    yaml = bundle / "goondan.yaml"
    yaml.write_text(yaml.read_text().replace("config: {tag: red}", "config: {tag: blue}"))
    proc = daemon.cli("restart")
    assert proc.stdout.strip() == "reloaded; restarted: a", proc.stderr
    assert daemon.send("version?").stdout.strip() == "v2-blue"
    assert pids(daemon)["b"] == before["b"]

    # An extension that lost `register` is refused before any agent stops.
    ext.write_text("VERSION = 'v3'\n")
    proc = daemon.cli("restart")
    assert proc.returncode == 1 and "E_CONFIG_EXTENSION_NO_REGISTER" in proc.stderr
    assert daemon.send("version?").stdout.strip() == "v2-blue"


def test_a_slow_probe_does_not_stall_the_daemon(start_daemon, quickstart, tmp_path):
    daemon = start_daemon(quickstart, "--import-timeout", "60")
    assert daemon.send("What is 1 plus 2?").returncode == 0
    numbers = quickstart / "tools" / "numbers.py"
    probing, go_on = tmp_path / "probing", tmp_path / "go-on"
    numbers.write_text(  # an import that lasts until the test lets it finish
        f"import os, time\nopen({str(probing)!r}, 'w').close()\n"
        f"while not os.path.exists({str(go_on)!r}):\n    time.sleep(0.01)\n" + numbers.read_text()
    )
    restart = subprocess.Popen(
        [*GOONDAN, "restart", "--state-root", str(daemon.state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(probing.exists, timeout=30)
        # The probe is importing; the daemon still routes a turn through both agents.
        reply = daemon.send("What is 3 plus 4?")
        assert reply.returncode == 0 and "7 is a prime" in reply.stdout
        assert restart.poll() is None, "the reload should still be probing"
        go_on.touch()
        out, err = restart.communicate(timeout=60)
    finally:
        restart.kill()
    assert restart.returncode == 0, err
    assert out.strip() == "reloaded; restarted: researcher"


def test_a_stop_during_a_hanging_probe_is_not_held_by_it(start_daemon, quickstart, tmp_path):
    daemon = start_daemon(quickstart, "--import-timeout", "120")
    pid_file = tmp_path / "probe-child.pid"
    numbers = quickstart / "tools" / "numbers.py"
    hang = (
        "import subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n"
    )
    numbers.write_text(hang + numbers.read_text())
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(pid_file.exists, timeout=30)
    started = time.monotonic()
    assert daemon.stop() == 0
    assert time.monotonic() - started < 30  # not the 120 s time limit
    wait_for(lambda: not pid_alive(int(pid_file.read_text())), timeout=5)
