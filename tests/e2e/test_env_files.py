"""Env files end to end: `<bundle>/.env`, `.env.local` and `--env-file`, in their precedence
under the process environment, as the agent's own tool sees them; errors naming file and line;
a reload reading them again."""

import pytest

from tests.e2e.conftest import goondan, solo_bundle, write_bundle
from tests.fakes.openai_server import FakeOpenAIServerThread

NAMES = ("GD_A", "GD_B", "GD_C", "GD_D", "GD_E")

TOOL = f"""\
import os

def run(ctx, args):
    return {{name: os.environ.get(name, "unset") for name in {NAMES!r}}}

handlers = {{"run": run}}
"""

RULES = [
    {
        "when": "show",
        "steps": [
            {"call": "envtool__run", "args": {}},
            {"reply": "|".join(f"{{{{result.{name}}}}}" for name in NAMES)},
        ],
    }
]


def env_bundle(directory):
    return solo_bundle(
        directory,
        rules=RULES,
        tool="envtool",
        code=TOOL,
        files={
            ".env": "# lowest\nGD_A=xdotenvx\nGD_B=xdotenvx\nGD_C=xdotenvx\n",
            ".env.local": "GD_B=xlocalx\nGD_C=xlocalx\nGD_D='xlocalx'\n",
        },
    )


@pytest.mark.parametrize("spawn", ["zygote", "subprocess"])
def test_precedence_process_env_over_env_files_over_local_over_dotenv(tmp_path, state_root, spawn):
    bundle = env_bundle(tmp_path / "b")
    first = tmp_path / "first.env"
    first.write_text("GD_C=xfirstx\nGD_D=xfirstx\nGD_E=xfirstx\n")
    second = tmp_path / "second.env"
    second.write_text("export GD_D=xsecondx\nGD_E=xsecondx\n")

    proc = goondan(
        "run", str(bundle), "--state-root", str(state_root), "--spawn", spawn,
        "--env-file", str(first), "--env-file", str(second), "--input", "show",
        env={**_clean_env(), "GD_E": "process"},
    )  # fmt: skip

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "xdotenvx|xlocalx|xfirstx|xsecondx|process"
    for value in ("xdotenvx", "xlocalx", "xfirstx", "xsecondx"):
        assert value not in proc.stderr  # names may be logged, values never


def test_a_model_api_key_comes_from_env_local_over_dotenv(tmp_path, state_root):
    with FakeOpenAIServerThread(api_key="sk-right") as server:
        server.queue_reply(text="key accepted")
        bundle = write_bundle(
            tmp_path / "b",
            f"""\
            apiVersion: goondan.ai/v1
            kind: Model
            metadata: {{name: llm}}
            spec:
              provider: openai
              model: m
              endpoint: {server.base_url}
              apiKey: {{valueFrom: {{env: GD_LLM_KEY}}}}
              options: {{maxRetries: 0}}
            ---
            apiVersion: goondan.ai/v1
            kind: Agent
            metadata: {{name: helper}}
            spec: {{modelConfig: {{modelRef: Model/llm}}}}
            ---
            apiVersion: goondan.ai/v1
            kind: Swarm
            metadata: {{name: default}}
            spec: {{entryAgent: Agent/helper, agents: [{{ref: Agent/helper}}]}}
            """,
            files={".env": "GD_LLM_KEY=sk-wrong\n", ".env.local": "GD_LLM_KEY=sk-right\n"},
        )

        proc = goondan(
            "run", str(bundle), "--state-root", str(state_root), "--input", "hi",
            env=_clean_env(),
        )  # fmt: skip

        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "key accepted"
        assert server.authorizations == ["Bearer sk-right"]
        assert "sk-right" not in proc.stderr and "sk-wrong" not in proc.stderr


def test_a_missing_env_file_is_an_error_naming_it(tmp_path, state_root):
    bundle = env_bundle(tmp_path / "b")
    missing = tmp_path / "nope.env"

    run = goondan(
        "run", str(bundle), "--state-root", str(state_root), "--env-file", str(missing),
        "--input", "show",
    )  # fmt: skip
    validate = goondan("validate", str(bundle), "--env-file", str(missing))

    for proc in (run, validate):
        assert proc.returncode == 1
        assert "Traceback" not in proc.stderr + proc.stdout
        assert f"{missing}: env file not found" in proc.stderr + proc.stdout
    assert "nothing was started" in run.stderr


def test_a_malformed_line_is_reported_with_file_and_line_but_not_its_text(tmp_path, state_root):
    bundle = env_bundle(tmp_path / "b")
    (bundle / ".env.local").write_text("GD_B=ok\nthis is secret-text\n")

    run = goondan("run", str(bundle), "--state-root", str(state_root), "--input", "show")
    validate = goondan("validate", str(bundle))

    for proc in (run, validate):
        out = proc.stderr + proc.stdout
        assert proc.returncode == 1, out
        assert f"{bundle / '.env.local'}:2: env file line is not NAME=value" in out
        assert "secret-text" not in out and "Traceback" not in out


def test_validate_passes_with_env_files(tmp_path):
    bundle = env_bundle(tmp_path / "b")
    extra = tmp_path / "x.env"
    extra.write_text("GD_X=1\n")

    proc = goondan("validate", str(bundle), "--env-file", str(extra))

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "is valid" in proc.stdout


def test_a_reload_reads_the_env_files_again_under_the_process_env(
    tmp_path, start_daemon, monkeypatch
):
    bundle = env_bundle(tmp_path / "b")
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    daemon = start_daemon(bundle, env={"GD_E": "process"})
    assert daemon.send("show").stdout.strip() == "xdotenvx|xlocalx|xlocalx|xlocalx|process"

    (bundle / ".env").write_text("GD_A=zebra-value\nGD_C=xdotenvx\nGD_E=file\n")
    (bundle / ".env.local").unlink()
    proc = daemon.cli("restart")

    assert proc.returncode == 0, proc.stderr + daemon.logs()
    assert daemon.send("show").stdout.strip() == "zebra-value|unset|xdotenvx|unset|process"
    logs = daemon.logs()
    assert "env files changed" in logs and "GD_A" in logs and "zebra" not in logs


def test_a_reload_with_a_broken_env_file_is_refused(tmp_path, start_daemon):
    bundle = env_bundle(tmp_path / "b")
    daemon = start_daemon(bundle, env={"GD_E": "process"})
    (bundle / ".env").write_text("GD_A=fine\nnot an assignment\n")

    proc = daemon.cli("restart")

    assert proc.returncode == 1
    assert f"{bundle / '.env'}:2" in proc.stdout + proc.stderr
    assert daemon.send("show").stdout.strip().startswith("xdotenvx|xlocalx|")


def _clean_env():
    import os

    return {k: v for k, v in os.environ.items() if k not in NAMES and k != "GD_LLM_KEY"}
