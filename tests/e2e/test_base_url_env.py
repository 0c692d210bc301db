"""A Model without `endpoint` follows the provider SDK's own base-URL variable, so an unmodified
bundle can be pointed at a gateway or proxy, and the agent's log says which endpoint it uses."""

import pytest

from tests.e2e.conftest import write_bundle
from tests.fakes.anthropic_server import FakeAnthropicServerThread
from tests.fakes.google_server import FakeGoogleServerThread
from tests.fakes.openai_server import FakeOpenAIServerThread

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: llm}
spec:
  provider: %(provider)s
  model: some-model
  apiKey:
    valueFrom: {env: LLM_KEY}
  options: {maxRetries: 0}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/llm}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/helper
  agents: [{ref: Agent/helper}]
"""

CASES = [
    ("openai", "OPENAI_BASE_URL", FakeOpenAIServerThread, "/v1"),
    ("anthropic", "ANTHROPIC_BASE_URL", FakeAnthropicServerThread, ""),
    ("google", "GOOGLE_GEMINI_BASE_URL", FakeGoogleServerThread, ""),
]


@pytest.mark.parametrize(("provider", "variable", "fake", "suffix"), CASES)
def test_a_model_without_endpoint_uses_the_sdk_base_url_variable(
    start_daemon, tmp_path, provider, variable, fake, suffix
):
    with fake(api_key="sk-gateway") as server:
        server.queue_reply(text="through the gateway")
        bundle = write_bundle(tmp_path / "b", BUNDLE % {"provider": provider})
        url = server.root_url + suffix
        daemon = start_daemon(bundle, env={"LLM_KEY": "sk-gateway", variable: url})

        proc = daemon.send("hello")

        assert proc.returncode == 0, proc.stderr + daemon.logs()
        assert proc.stdout.strip() == "through the gateway"
        assert len(server.requests) == 1
        logs = daemon.logs()
        assert "model endpoint" in logs and url in logs and f"${variable}" in logs


def test_an_explicit_endpoint_wins_over_the_base_url_variable(start_daemon, tmp_path):
    with FakeOpenAIServerThread(api_key="sk-gateway") as server:
        server.queue_reply(text="from the bundle's endpoint")
        text = BUNDLE % {"provider": "openai"}
        text = text.replace("  model: some-model\n", f"  model: m\n  endpoint: {server.base_url}\n")
        bundle = write_bundle(tmp_path / "b", text)
        env = {"LLM_KEY": "sk-gateway", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
        daemon = start_daemon(bundle, env=env)

        proc = daemon.send("hello")

        assert proc.returncode == 0, proc.stderr + daemon.logs()
        assert proc.stdout.strip() == "from the bundle's endpoint"
