"""`goondan init`: every template writes a bundle that validates and runs at once, nothing is
ever overwritten, and the templates are found in a plain (non-editable) install too."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.cli.init_cmd import TEMPLATES
from tests.e2e.conftest import REPO, goondan, wait_for
from tests.e2e.test_connectors import free_port, post
from tests.fakes.anthropic_server import FakeAnthropicServerThread
from tests.fakes.openai_server import FakeOpenAIServerThread

QUESTION = "What is 19 plus 23? Ask the researcher for a fun fact too."


def init(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return goondan("init", *args, **kw)


def tree(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): p.read_text()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def assert_valid(bundle: Path) -> None:
    proc = goondan("validate", str(bundle), "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == {"valid": True, "errors": [], "warnings": []}


def test_list_names_every_template_with_a_description():
    proc = init("--list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(TEMPLATES)
    assert lines[0].startswith("quickstart") and lines[0].endswith("(default)")
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)  # a name and a description
    assert "mcp" in TEMPLATES  # MCP tools (issue 30): tests/e2e/test_mcp_e2e.py runs it


def test_an_unknown_template_exits_2_with_the_list(tmp_path):
    proc = init(str(tmp_path / "b"), "--template", "nope")
    assert proc.returncode == 2
    assert "unknown template 'nope'" in proc.stderr
    for name in TEMPLATES:
        assert name in proc.stderr
    assert not (tmp_path / "b").exists()


def test_quickstart_is_the_default_and_runs_offline(tmp_path, state_root):
    bundle = tmp_path / "my bot"  # a space: the printed commands must still work when pasted
    proc = init(str(bundle))
    assert proc.returncode == 0, proc.stderr
    written = tree(bundle)
    assert sorted(written) == [
        ".gitignore",
        "README.md",
        "goondan.yaml",
        "tools/calc.py",
        "tools/numbers.py",
    ]
    for name in written:
        assert str(bundle / name) in proc.stdout
    assert f"goondan run '{bundle}' --transcript --input" in proc.stdout
    assert {".env", ".env.local"} <= set(written[".gitignore"].splitlines())

    assert_valid(bundle)
    proc = goondan("run", str(bundle), "--state-root", str(state_root), "--input", QUESTION)
    assert proc.returncode == 0, proc.stderr
    assert "19 plus 23 is 42" in proc.stdout
    assert "42 is not a prime, is written 101010 in binary" in proc.stdout  # the delegation


def test_init_without_a_directory_writes_into_the_current_one(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    proc = init(cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "goondan.yaml").is_file() and (tmp_path / "tools" / "calc.py").is_file()
    assert "goondan run . --transcript" in proc.stdout
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert_valid(tmp_path)


def test_an_existing_file_means_nothing_is_written(tmp_path):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text("# my own bundle\n")
    (bundle / "README.md").write_text("mine\n")

    proc = init(str(bundle), "--template", "openai")

    assert proc.returncode == 1
    assert "nothing written" in proc.stderr
    assert "goondan.yaml" in proc.stderr and "README.md" in proc.stderr
    assert tree(bundle) == {"goondan.yaml": "# my own bundle\n", "README.md": "mine\n"}


def test_a_file_where_a_directory_goes_means_nothing_is_written(tmp_path):
    (tmp_path / "tools").write_text("not a directory")
    proc = init(str(tmp_path))
    assert proc.returncode == 1
    assert "tools" in proc.stderr
    assert tree(tmp_path) == {"tools": "not a directory"}


def test_a_file_given_as_the_directory_is_refused(tmp_path):
    target = tmp_path / "f"
    target.write_text("x")
    proc = init(str(target))
    assert proc.returncode == 1 and "not a directory" in proc.stderr
    assert target.read_text() == "x"


def test_webhook_template_serves_signed_requests(start_daemon, tmp_path):
    bundle = tmp_path / "hook"
    proc = init(str(bundle), "-t", "webhook")
    assert proc.returncode == 0, proc.stderr
    assert "WEBHOOK_SECRET" in proc.stdout
    assert env_example(bundle) == ["WEBHOOK_SECRET"]
    assert_valid(bundle)

    port = free_port()  # the template listens on 8080; a test must not depend on it being free
    main = bundle / "goondan.yaml"
    text = main.read_text()
    assert 'PORT: {value: "8080"}' in text
    main.write_text(text.replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}'))
    secret = "init-template-secret"
    start_daemon(bundle, env={"WEBHOOK_SECRET": secret})

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout=20)
    status, body = post(port, {"text": "What is 19 plus 23?", "wait": True}, secret=secret)
    assert status == 200, body
    assert body["reply"] == "19 plus 23 is 42." and body["agent"] == "responder"
    status, body = post(port, {"text": "hi"}, secret=None)
    assert status == 401, body


PROVIDERS = [
    ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", FakeOpenAIServerThread, "/v1"),
    ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", FakeAnthropicServerThread, ""),
]


@pytest.mark.parametrize(("template", "key_var", "url_var", "fake", "suffix"), PROVIDERS)
def test_provider_template_runs_against_the_base_url_variable(
    tmp_path, state_root, template, key_var, url_var, fake, suffix
):
    bundle = tmp_path / template
    proc = init(str(bundle), "--template", template)
    assert proc.returncode == 0, proc.stderr
    assert key_var in proc.stdout
    assert sorted(tree(bundle)) == [
        ".env.example",
        ".gitignore",
        "README.md",
        "goondan.yaml",
        "tools/calc.py",
    ]
    assert env_example(bundle) == [key_var]  # names only; the base URL is a commented option
    assert f"# {url_var}=" in (bundle / ".env.example").read_text()
    assert "endpoint:" not in (bundle / "goondan.yaml").read_text()  # or the variable is ignored
    clean = {k: v for k, v in os.environ.items() if k not in (key_var, url_var)}
    assert goondan("validate", str(bundle), env=clean).returncode == 0  # no key needed to check

    with fake(api_key="sk-template") as server:
        server.queue_reply(
            tool_calls=[{"name": "calc__multiply", "arguments": {"a": 1234, "b": 5678}}]
        )
        server.queue_reply(text="1234 times 5678 is 7006652.")
        env = {**clean, key_var: "sk-template", url_var: server.root_url + suffix}
        proc = goondan(
            "run",
            str(bundle),
            "--state-root",
            str(state_root),
            "--input",
            "What is 1234 times 5678?",
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "1234 times 5678 is 7006652."
        assert len(server.requests) == 2
        assert "calc__multiply" in json.dumps(server.requests[0]["tools"])
        assert "7006652" in json.dumps(server.requests[1]["messages"])  # the tool ran


def env_example(bundle: Path) -> list[str]:
    """The variables `.env.example` sets, after checking it gives none a value."""
    names = []
    for line in (bundle / ".env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            assert value == "", f"{line!r}: .env.example must not hold values"
            names.append(name)
    return names


def test_templates_come_from_a_non_editable_install(tmp_path):
    """Built and installed as a wheel, outside the repository: the templates are package data,
    found through importlib.resources."""
    source = tmp_path / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("ipc", "goondan", "agentproc", "orchestrator", "base_tools"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), "."],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    shutil.rmtree(source)  # nothing may be read from the source tree
    installed = site / "goondan" / "templates"
    assert not list(installed.rglob("*.py"))  # templates' tools are data, not goondan modules
    env = {**os.environ, "PYTHONPATH": str(site)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    where = subprocess.run(
        [sys.executable, "-c", "import goondan; print(goondan.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(site)
    for name in TEMPLATES:
        proc = subprocess.run(
            [sys.executable, "-m", "goondan.cli.main", "init", name, "--template", name],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert (elsewhere / name / "goondan.yaml").is_file()
        assert (elsewhere / name / ".gitignore").is_file()
        entry = "servers/text.py" if name == "mcp" else "tools/calc.py"
        assert (elsewhere / name / entry).is_file()
