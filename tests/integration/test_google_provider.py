"""The `google` provider over real HTTP against a scripted Gemini API server on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentproc.messages import Message, ModelError, ModelReply, ModelRequest, ToolCall, Usage
from agentproc.providers import Provider
from tests.fakes.google_server import FakeGoogleServer
from tests.integration.provider_testkit import (
    BASH,
    ask,
    closed_port,
    complete,
    make_test_provider,
)

KEY = "gemini-test-key"


@pytest.fixture
async def server() -> AsyncIterator[FakeGoogleServer]:
    async with FakeGoogleServer(api_key=KEY) as fake:
        yield fake


def provider_for(
    endpoint: str | None, api_key: str | None = KEY, *, streaming: bool = False, **options: Any
) -> Provider:
    return make_test_provider(
        "google", "gemini-test", endpoint, api_key, streaming=streaming, **options
    )


def tool_round_trip(signature: str | None = None) -> ModelRequest:
    """A conversation after a step with two tool calls, as the turn loop builds it."""
    state = {"providerState": {"google": {"signatures": {"c1": signature}}}} if signature else {}
    return ModelRequest(
        messages=[
            Message(id="s", role="system", content="You are terse."),
            Message(id="u", role="user", content="what is here?"),
            Message(
                id="a",
                role="assistant",
                content="Looking.",
                tool_calls=(
                    ToolCall(id="c1", name="bash", arguments='{"cmd": "ls"}'),
                    ToolCall(id="c2", name="bash", arguments='{"cmd": "pwd"}'),
                ),
                metadata=state,
            ),
            Message(
                id="t1", role="tool", content='{"status": "ok", "output": "a"}', tool_call_id="c1"
            ),
            Message(id="t2", role="tool", content="plain text", tool_call_id="c2"),
        ],
        tools=[BASH],
        params={"temperature": 0.2, "maxTokens": 256, "topP": 0.9, "thinking": {"x": 1}},
    )


async def test_text_reply(server: FakeGoogleServer) -> None:
    server.queue_reply(text="Hello there", usage=(11, 2))

    reply = await complete(provider_for(server.base_url), ask("hi"))

    assert reply == ModelReply(
        text="Hello there", usage=Usage(input_tokens=11, output_tokens=2), finish_reason="stop"
    )
    body = server.requests[0]
    assert (body["_model"], body["_method"]) == ("gemini-test", "generateContent")
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert "systemInstruction" not in body and "tools" not in body
    assert server.api_keys == [KEY]


async def test_tool_call_round_trip(server: FakeGoogleServer) -> None:
    server.queue_reply(
        tool_calls=[{"name": "bash", "arguments": {"cmd": "id"}, "thoughtSignature": "c2ln"}]
    )

    reply = await complete(provider_for(server.base_url), tool_round_trip(signature="b2xk"))

    (call,) = reply.tool_calls
    assert (call.name, call.arguments) == ("bash", '{"cmd": "id"}')
    assert reply.finish_reason == "tool_calls"
    # The signature comes back in the reply, for the loop to keep with the assistant message.
    assert reply.provider_state == {"google": {"signatures": {call.id: "c2ln"}}}
    body = server.requests[0]
    assert body["systemInstruction"]["parts"] == [{"text": "You are terse."}]
    (declarations,) = [tool["functionDeclarations"] for tool in body["tools"]]
    assert [d["name"] for d in declarations] == ["bash"]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "what is here?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Looking."},
                {
                    "functionCall": {"id": "c1", "name": "bash", "args": {"cmd": "ls"}},
                    "thoughtSignature": "b2xk",
                },
                {"functionCall": {"id": "c2", "name": "bash", "args": {"cmd": "pwd"}}},
            ],
        },
        {
            # Both results in one user turn, named after their calls.
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "c1",
                        "name": "bash",
                        "response": {"status": "ok", "output": "a"},
                    }
                },
                {
                    "functionResponse": {
                        "id": "c2",
                        "name": "bash",
                        "response": {"output": "plain text"},
                    }
                },
            ],
        },
    ]
    config = body["generationConfig"]
    assert (config["temperature"], config["maxOutputTokens"], config["topP"]) == (0.2, 256, 0.9)
    assert "thinking" not in str(config)  # Anthropic's knob is dropped


async def test_streaming_text_and_tool_call(server: FakeGoogleServer) -> None:
    server.queue_reply(
        text="Let me look.",
        tool_calls=[{"name": "bash", "arguments": {"cmd": "ls"}}],
        usage=(7, 5),
    )
    seen: list[str] = []

    reply = await complete(provider_for(server.base_url, streaming=True), ask("go"), seen)

    assert seen == ["Let ", "me ", "look."]
    assert reply.text == "Let me look."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("bash", '{"cmd": "ls"}')]
    assert (reply.usage, reply.finish_reason) == (Usage(7, 5), "tool_calls")
    assert server.requests[0]["_method"] == "streamGenerateContent"


async def test_cut_stream_is_a_retryable_interruption(server: FakeGoogleServer) -> None:
    server.queue_reply(text="one two three four", cut_after=2)

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, streaming=True), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_STREAM_INTERRUPTED", True)


async def test_retries_then_succeeds(server: FakeGoogleServer) -> None:
    server.queue_error(503, "The model is overloaded.")
    server.queue_error(429, "Resource has been exhausted")
    server.queue_reply(text="finally")

    reply = await complete(provider_for(server.base_url, maxRetries=2), ask())

    assert reply.text == "finally"
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("status", "code"), [(429, "E_MODEL_RATE_LIMITED"), (503, "E_MODEL_UNAVAILABLE")]
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_transient_statuses_are_retryable(
    server: FakeGoogleServer, status: int, code: str, streaming: bool
) -> None:
    server.queue_error(status, "try again later")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, streaming=streaming), ask())

    assert (caught.value.code, caught.value.retryable) == (code, True)
    assert "try again later" in str(caught.value)
    assert len(server.requests) == 1  # maxRetries 0


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_statuses_are_not_retried(server: FakeGoogleServer, status: int) -> None:
    server.queue_error(status, "no access")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, maxRetries=3), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_AUTH", False)
    assert len(server.requests) == 1


async def test_wrong_key_is_an_auth_error_naming_the_variable(server: FakeGoogleServer) -> None:
    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, api_key="wrong", maxRetries=3), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_AUTH", False)
    assert "API key not valid" in str(caught.value) and "GEMINI_API_KEY" in str(caught.value)
    assert len(server.requests) == 1


async def test_bad_request_surfaces_the_server_message(server: FakeGoogleServer) -> None:
    server.queue_error(400, "maxOutputTokens is too large")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, maxRetries=3), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_BAD_REQUEST", False)
    assert "maxOutputTokens is too large" in str(caught.value)
    assert len(server.requests) == 1


async def test_a_context_length_refusal_is_a_context_overflow(server: FakeGoogleServer) -> None:
    # Gemini's own words for a prompt over the model's window (400 INVALID_ARGUMENT).
    server.queue_error(
        400, "The input token count (1200000) exceeds the maximum number of tokens allowed"
    )

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, maxRetries=3), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_CONTEXT_OVERFLOW", False)
    assert len(server.requests) == 1


async def test_finish_reasons_are_mapped(server: FakeGoogleServer) -> None:
    server.queue_reply(text="cut", finish_reason="MAX_TOKENS")
    server.queue_reply(text="no", finish_reason="SAFETY")
    provider = provider_for(server.base_url)
    try:
        assert (await provider.complete(ask())).finish_reason == "length"
        assert (await provider.complete(ask())).finish_reason == "content_filter"
    finally:
        await provider.aclose()


def test_missing_key_for_the_public_api_names_the_variable() -> None:
    with pytest.raises(ModelError) as caught:
        provider_for(None, api_key=None)

    assert caught.value.code == "E_MODEL_AUTH"
    assert "valueFrom.env: GEMINI_API_KEY" in str(caught.value)


async def test_unreachable_endpoint_is_retryable() -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(url), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_UNREACHABLE", True)
    assert url in str(caught.value)


async def test_headers_option_is_sent(server: FakeGoogleServer) -> None:
    await complete(provider_for(server.base_url, headers={"x-team": "blue"}), ask())

    assert server.request_headers[0]["x-team"] == "blue"


async def test_unknown_param_is_a_config_error(server: FakeGoogleServer) -> None:
    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), ask(noSuchKnob=1))

    assert caught.value.code == "E_MODEL_CONFIG"
    assert server.requests == []


def test_the_sdk_is_imported_only_by_a_google_model() -> None:
    code = (
        "import sys\n"
        "import agentproc.zygote\n"
        "from agentproc.providers import make_provider\n"
        "from goondan.bundle.model import ModelSpec\n"
        "make_provider(ModelSpec(provider='scripted', model='s'), None)\n"
        "before = 'google.genai' in sys.modules\n"
        "spec = ModelSpec(provider='google', model='g', endpoint='http://127.0.0.1:9')\n"
        "make_provider(spec, 'k')\n"
        "print(before, 'google.genai' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]
