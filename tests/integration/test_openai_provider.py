"""The `openai` provider over real HTTP against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentproc.messages import Message, ModelError, ModelRequest, ToolCall, Usage
from agentproc.providers import Provider
from tests.fakes.openai_server import FakeOpenAIServer, FakeOpenAIServerThread
from tests.integration.provider_testkit import (
    BASH,
    ask,
    closed_port,
    complete,
    make_test_provider,
)

KEY = "sk-test-123"


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


def provider_for(
    endpoint: str | None, api_key: str | None = KEY, *, streaming: bool = False, **options: Any
) -> Provider:
    return make_test_provider(
        "openai", "gpt-test", endpoint, api_key, streaming=streaming, **options
    )


async def test_text_reply(server: FakeOpenAIServer) -> None:
    server.queue_reply(text="Hello there")

    reply = await complete(provider_for(server.base_url), ask("hi"))

    assert reply.text == "Hello there"
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    assert server.requests[0]["model"] == "gpt-test"
    assert server.authorizations == [f"Bearer {KEY}"]


async def test_tool_calls_keep_id_name_and_raw_arguments(server: FakeOpenAIServer) -> None:
    server.queue_reply(
        tool_calls=[
            {"id": "call_abc", "name": "bash", "arguments": '{"cmd": "ls -la"}'},
            # Malformed JSON must reach the loop verbatim so it can tell the model.
            {"id": "call_def", "name": "bash", "arguments": '{"cmd": '},
        ]
    )

    reply = await complete(provider_for(server.base_url), ask("list files"))

    assert reply.text is None
    assert reply.tool_calls == (
        ToolCall(id="call_abc", name="bash", arguments='{"cmd": "ls -la"}'),
        ToolCall(id="call_def", name="bash", arguments='{"cmd": '),
    )
    assert reply.finish_reason == "tool_calls"


async def test_request_carries_translated_conversation_tools_and_params(
    server: FakeOpenAIServer,
) -> None:
    request = ModelRequest(
        messages=[
            Message(id="s", role="system", content="You are terse."),
            Message(id="u", role="user", content="list files"),
            Message(
                id="a",
                role="assistant",
                content=None,
                tool_calls=(ToolCall(id="call_1", name="bash", arguments='{"cmd": "ls"}'),),
            ),
            Message(id="t", role="tool", content="a.txt\nb.txt", tool_call_id="call_1"),
        ],
        tools=[BASH],
        params={"temperature": 0.2, "maxTokens": 256, "topP": 0.9, "repetition_penalty": 1.1},
    )

    await complete(provider_for(server.base_url, top_k=40), request)

    body = server.requests[0]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a shell command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
        }
    ]
    assert (body["temperature"], body["max_tokens"], body["top_p"]) == (0.2, 256, 0.9)
    # Server-specific knobs reach the body: agent params and Model options alike.
    assert body["repetition_penalty"] == 1.1
    assert body["top_k"] == 40
    assert "maxTokens" not in body and "maxRetries" not in body
    assert body.get("stream") in (None, False)


async def test_agent_params_win_over_model_option_defaults(server: FakeOpenAIServer) -> None:
    provider = provider_for(server.base_url, temperature=0.9, maxTokens=100, top_k=40)

    await complete(provider, ask(temperature=0.1, top_k=5))

    body = server.requests[0]
    assert (body["temperature"], body["top_k"]) == (0.1, 5)
    assert body["max_tokens"] == 100  # a Model default the Agent did not override


async def test_snake_case_params_and_no_tools_field_without_tools(
    server: FakeOpenAIServer,
) -> None:
    await complete(provider_for(server.base_url), ask(max_tokens=64, top_p=0.5))

    body = server.requests[0]
    assert (body["max_tokens"], body["top_p"]) == (64, 0.5)
    # Some local servers reject an empty tools list, so none is sent.
    assert "tools" not in body


async def test_lenient_server_without_tool_call_ids_or_usage(server: FakeOpenAIServer) -> None:
    # Some llama.cpp builds send tool calls with no id or type, and no usage block.
    server.queue_raw(
        200,
        {
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "tool_calls": [
                            {"function": {"name": "bash", "arguments": "{}"}},
                            {"function": {"name": "bash", "arguments": "{}"}},
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        },
    )

    reply = await complete(provider_for(server.base_url), ask())

    ids = [call.id for call in reply.tool_calls]
    assert len(set(ids)) == 2 and all(ids)  # results can still be paired with their calls
    assert reply.usage == Usage()


async def test_non_api_endpoint_is_explained(server: FakeOpenAIServer) -> None:
    server.queue_raw(200, "<html>Welcome to my web UI</html>")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), ask())

    assert "did not return a chat completion" in str(caught.value)
    assert "Model.spec.endpoint" in str(caught.value)


async def test_usage_is_reported(server: FakeOpenAIServer) -> None:
    server.queue_reply(text="ok", usage=(12, 5))

    reply = await complete(provider_for(server.base_url), ask())

    assert reply.usage == Usage(input_tokens=12, output_tokens=5)


async def test_organization_and_headers_options_are_sent(server: FakeOpenAIServer) -> None:
    provider = provider_for(server.base_url, organization="org-42", headers={"X-Title": "goondan"})

    await complete(provider, ask())

    headers = server.request_headers[0]
    assert headers["openai-organization"] == "org-42"
    assert headers["x-title"] == "goondan"
    assert "organization" not in server.requests[0]


async def test_wrong_key_is_an_auth_error_that_is_not_retried() -> None:
    async with FakeOpenAIServer(api_key="sk-right") as fake:
        with pytest.raises(ModelError) as caught:
            await complete(provider_for(fake.base_url, api_key="sk-wrong", maxRetries=2), ask())

        assert caught.value.code == "E_MODEL_AUTH"
        assert caught.value.retryable is False
        assert "Incorrect API key provided" in str(caught.value)
        assert "Model.spec.apiKey" in str(caught.value)
        assert len(fake.requests) == 1  # a wrong key does not get better by retrying
        assert fake.authorizations == ["Bearer sk-wrong"]


async def test_forbidden_is_an_auth_error(server: FakeOpenAIServer) -> None:
    server.queue_error(403, "Project does not have access to model gpt-test")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_AUTH", False)
    assert "does not have access" in str(caught.value)


async def test_bad_request_surfaces_the_server_message(server: FakeOpenAIServer) -> None:
    server.queue_error(400, "Invalid value for 'temperature': must be <= 2.", code="invalid_value")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), ask(temperature=5))

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_BAD_REQUEST", False)
    assert "Invalid value for 'temperature': must be <= 2." in str(caught.value)


@pytest.mark.parametrize(
    ("status", "code"),
    [(429, "E_MODEL_RATE_LIMITED"), (500, "E_MODEL_UNAVAILABLE"), (503, "E_MODEL_UNAVAILABLE")],
)
async def test_transient_statuses_are_retryable(
    server: FakeOpenAIServer, status: int, code: str
) -> None:
    server.queue_error(status, "try again later")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), ask())

    assert (caught.value.code, caught.value.retryable) == (code, True)
    assert "try again later" in str(caught.value)
    assert len(server.requests) == 1  # maxRetries 0 means one attempt


async def test_max_retries_rides_out_a_transient_failure(server: FakeOpenAIServer) -> None:
    # retry-after-ms keeps the SDK's backoff short.
    server.queue_error(503, "warming up", headers={"retry-after-ms": "10"})
    server.queue_reply(text="ready")

    reply = await complete(provider_for(server.base_url, maxRetries=1), ask())

    assert reply.text == "ready"
    assert len(server.requests) == 2


async def test_a_context_length_error_is_a_context_overflow(server: FakeOpenAIServer) -> None:
    server.queue_context_overflow()

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, maxRetries=2), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_CONTEXT_OVERFLOW", False)
    assert "maximum context length is 128000 tokens" in str(caught.value)
    assert len(server.requests) == 1  # the same prompt would not fit on a retry either


async def test_non_json_error_body_still_explains_itself(server: FakeOpenAIServer) -> None:
    server.queue_error(502, body="Bad Gateway from upstream proxy")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_UNAVAILABLE", True)
    assert "Bad Gateway from upstream proxy" in str(caught.value)


async def test_endpoint_missing_v1_hints_at_the_path(server: FakeOpenAIServer) -> None:
    # A common slip with Ollama/vLLM: `http://host:port` instead of `http://host:port/v1`.
    root = server.base_url.removesuffix("/v1")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(root), ask())

    assert caught.value.code == "E_MODEL_BAD_REQUEST"
    assert "404" in str(caught.value) and "/v1" in str(caught.value)


async def test_unreachable_endpoint_names_it() -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}/v1"

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(endpoint), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_UNREACHABLE", True)
    assert endpoint in str(caught.value)
    assert "connection refused" in str(caught.value)


async def test_unreachable_endpoint_says_where_it_was_set(monkeypatch) -> None:
    """The hint names the place the URL came from: the variable when the Model sets none, a
    fallback's own field for a fallback's endpoint."""
    from_variable = f"http://127.0.0.1:{closed_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", from_variable)

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(None), ask())

    assert from_variable in str(caught.value)
    assert str(caught.value).endswith("; check $OPENAI_BASE_URL")

    monkeypatch.delenv("OPENAI_BASE_URL")
    backup = f"http://127.0.0.1:{closed_port()}/v1"
    primary = f"http://127.0.0.1:{closed_port()}/v1"
    provider = provider_for(primary, fallbacks=[{"model": "gpt-backup", "endpoint": backup}])
    with pytest.raises(ModelError) as caught:
        await complete(provider, ask())

    assert f"{primary}: connection refused" in str(caught.value)
    assert "check Model.spec.endpoint" in str(caught.value)
    assert f"{backup}: connection refused" in str(caught.value)
    assert "check Model.spec.options.fallbacks[0].endpoint" in str(caught.value)


async def test_slow_server_times_out_per_timeout_seconds(server: FakeOpenAIServer) -> None:
    server.queue_reply(text="too late", delay_seconds=2.0)

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, timeoutSeconds=0.2), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_TIMEOUT", True)
    assert "timeoutSeconds" in str(caught.value)


@pytest.mark.parametrize("api_key", [None, ""])
def test_missing_key_for_the_public_api_fails_at_construction(api_key: str | None) -> None:
    with pytest.raises(ModelError) as caught:
        provider_for(None, api_key=api_key)

    assert caught.value.code == "E_MODEL_AUTH"
    assert "set Model.spec.apiKey (e.g. valueFrom.env: OPENAI_API_KEY)" in str(caught.value)


async def test_local_server_needs_no_key(server: FakeOpenAIServer) -> None:
    reply = await complete(provider_for(server.base_url, api_key=None), ask("ping"))

    assert reply.text == "echo: ping"
    assert server.authorizations == ["Bearer not-needed"]


def test_invalid_client_options_are_rejected() -> None:
    with pytest.raises(ModelError) as caught:
        provider_for("http://127.0.0.1:1/v1", maxRetries=-1)

    assert caught.value.code == "E_MODEL_CONFIG"
    assert "maxRetries" in str(caught.value)


async def test_thread_server_serves_a_client_on_another_loop() -> None:
    # The shape other tests use: server loop in a thread, client elsewhere (here: this loop).
    with FakeOpenAIServerThread() as fake:
        fake.queue_reply(tool_calls=[{"name": "bash", "arguments": {"cmd": "pwd"}}])
        provider = provider_for(fake.base_url)
        try:
            first = await provider.complete(ask("where am I?"))
            second = await provider.complete(ask("thanks"))
        finally:
            await provider.aclose()

        assert [(c.name, c.arguments) for c in first.tool_calls] == [("bash", '{"cmd": "pwd"}')]
        assert first.tool_calls[0].id  # the server invents an id when the script gives none
        assert second.text == "echo: thanks"
        assert [r["messages"][-1]["content"] for r in fake.requests] == ["where am I?", "thanks"]
        assert fake.pending == 0


# --- streaming (SSE) ---------------------------------------------------------------------------


async def test_streaming_text_reaches_on_text_in_order(server: FakeOpenAIServer) -> None:
    server.queue_reply(chunks=["Hel", "lo ", "there", "!"], usage=(7, 4))
    seen: list[str] = []

    reply = await complete(provider_for(server.base_url, streaming=True), ask(), seen)

    assert seen == ["Hel", "lo ", "there", "!"]
    assert reply.text == "Hello there!"
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    assert reply.usage == Usage(input_tokens=7, output_tokens=4)
    body = server.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_a_server_refusing_stream_options_still_streams() -> None:
    async with FakeOpenAIServer(reject_stream_options=True) as server:
        server.queue_reply(chunks=["Hel", "lo"])
        server.queue_reply(chunks=["again"])
        provider = provider_for(server.base_url, streaming=True)
        seen: list[str] = []
        try:
            first = await provider.complete(ask(), on_text=seen.append)
            second = await provider.complete(ask(), on_text=seen.append)
        finally:
            await provider.aclose()

    assert (first.text, second.text) == ("Hello", "again")
    assert seen == ["Hel", "lo", "again"]
    # Refused once, retried at once without it, and never sent again by this provider.
    assert ["stream_options" in body for body in server.requests] == [True, False, False]
    assert all(body["stream"] is True for body in server.requests)


async def test_other_bad_requests_are_not_retried_without_stream_options(
    server: FakeOpenAIServer,
) -> None:
    server.queue_error(400, "messages: too long")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, streaming=True), ask())

    assert caught.value.code == "E_MODEL_BAD_REQUEST"
    assert len(server.requests) == 1


async def test_streaming_assembles_tool_call_deltas(server: FakeOpenAIServer) -> None:
    server.queue_reply(
        text="Let me look.",
        tool_calls=[
            {"id": "call_a", "name": "bash", "arguments": {"cmd": "ls -la /tmp"}},
            {"id": "call_b", "name": "read", "arguments": {"path": "/etc/hostname"}},
        ],
    )
    seen: list[str] = []

    reply = await complete(provider_for(server.base_url, streaming=True), ask(), seen)

    assert "".join(seen) == "Let me look."
    assert reply.text == "Let me look."
    assert reply.tool_calls == (
        ToolCall(id="call_a", name="bash", arguments='{"cmd": "ls -la /tmp"}'),
        ToolCall(id="call_b", name="read", arguments='{"path": "/etc/hostname"}'),
    )
    assert reply.finish_reason == "tool_calls"


async def test_streaming_passes_malformed_arguments_through(server: FakeOpenAIServer) -> None:
    server.queue_reply(tool_calls=[{"id": "call_x", "name": "bash", "arguments": '{"cmd": "ls'}])

    reply = await complete(provider_for(server.base_url, streaming=True), ask(), [])

    assert reply.text is None
    assert reply.tool_calls == (ToolCall(id="call_x", name="bash", arguments='{"cmd": "ls'),)


async def test_streaming_without_usage_chunk_or_call_ids(server: FakeOpenAIServer) -> None:
    # A lenient server: no include_usage chunk, a tool call delta with no id.
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "function": {"name": "bash", "arguments": '{"cmd"'}}
                        ]
                    },
                    "finish_reason": None,
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ': "ls"}'}}]},
                    "finish_reason": None,
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    stream = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    server.queue_raw(200, stream, headers={"Content-Type": "text/event-stream"})

    reply = await complete(provider_for(server.base_url, streaming=True), ask(), [])

    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("bash", '{"cmd": "ls"}')]
    assert reply.tool_calls[0].id
    assert reply.usage == Usage()


async def test_stream_cut_mid_way_is_a_retryable_interruption(server: FakeOpenAIServer) -> None:
    server.queue_reply(text="one two three four five", cut_after=3)

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, streaming=True), ask(), [])

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_STREAM_INTERRUPTED", True)
    assert "broke off the stream" in str(caught.value)


async def test_streaming_errors_before_the_stream_map_like_json_ones(
    server: FakeOpenAIServer,
) -> None:
    server.queue_error(401, "Incorrect API key provided.")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, streaming=True), ask(), [])

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_AUTH", False)
