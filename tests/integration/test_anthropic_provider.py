"""The `anthropic` provider over real HTTP against a scripted Messages API server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentproc.messages import Message, ModelError, ModelReply, ModelRequest, ToolCall, Usage
from agentproc.providers import Provider
from tests.fakes.anthropic_server import FakeAnthropicServer, FakeAnthropicServerThread
from tests.integration.provider_testkit import (
    BASH,
    ask,
    closed_port,
    complete,
    make_test_provider,
)

KEY = "sk-ant-test"


@pytest.fixture
async def server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(api_key=KEY) as fake:
        yield fake


def provider_for(
    endpoint: str | None, api_key: str | None = KEY, *, streaming: bool = False, **options: Any
) -> Provider:
    """Prompt caching off unless a test turns it on: the other tests compare whole bodies, and
    the caching tests below check where its breakpoints go."""
    options.setdefault("promptCaching", False)
    return make_test_provider(
        "anthropic", "claude-test", endpoint, api_key, streaming=streaming, **options
    )


def tool_round_trip() -> ModelRequest:
    """A conversation after a step with two tool calls, as the turn loop builds it."""
    return ModelRequest(
        messages=[
            Message(id="s", role="system", content="You are terse."),
            Message(id="u", role="user", content="what is here?"),
            Message(
                id="a",
                role="assistant",
                content="Looking.",
                tool_calls=(
                    ToolCall(id="toolu_01", name="bash", arguments='{"cmd": "ls"}'),
                    ToolCall(id="toolu_02", name="bash", arguments='{"cmd": "pwd"}'),
                ),
            ),
            Message(
                id="t1",
                role="tool",
                content='{"status": "ok", "output": "a.txt"}',
                tool_call_id="toolu_01",
            ),
            Message(
                id="t2",
                role="tool",
                content='{"status": "error", "error": "denied"}',
                tool_call_id="toolu_02",
            ),
        ],
        tools=[BASH],
        params={"temperature": 0.2, "maxTokens": 256, "topP": 0.9},
    )


async def test_text_reply(server: FakeAnthropicServer) -> None:
    server.queue_reply(text="Hello there", usage=(11, 2))

    reply = await complete(provider_for(server.base_url), ask("hi"))

    assert reply == ModelReply(
        text="Hello there", usage=Usage(input_tokens=11, output_tokens=2), finish_reason="stop"
    )
    body = server.requests[0]
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 4096  # the API requires it; the default when no param sets it
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert "system" not in body and "tools" not in body and not body.get("stream")
    assert server.api_keys == [KEY]
    assert server.request_headers[0]["anthropic-version"]


async def test_tool_use_round_trip(server: FakeAnthropicServer) -> None:
    server.queue_reply(tool_calls=[{"id": "toolu_03", "name": "bash", "arguments": {"cmd": "id"}}])

    reply = await complete(provider_for(server.base_url), tool_round_trip())

    assert reply.tool_calls == (ToolCall(id="toolu_03", name="bash", arguments='{"cmd": "id"}'),)
    assert reply.finish_reason == "tool_calls"
    body = server.requests[0]
    assert body["system"] == "You are terse."
    assert body["tools"] == [
        {
            "name": "bash",
            "description": "Run a shell command",
            "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what is here?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "toolu_02", "name": "bash", "input": {"cmd": "pwd"}},
            ],
        },
        {
            # Both results in one user message, paired by id, the failed one flagged.
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": '{"status": "ok", "output": "a.txt"}',
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "content": '{"status": "error", "error": "denied"}',
                    "is_error": True,
                },
            ],
        },
    ]
    assert (body["temperature"], body["max_tokens"], body["top_p"]) == (0.2, 256, 0.9)


async def test_foreign_tool_call_ids_are_made_acceptable_on_both_sides(
    server: FakeAnthropicServer,
) -> None:
    # E.g. a conversation begun on another model before a fallback.
    request = ModelRequest(
        messages=[
            Message(id="u", role="user", content="go"),
            Message(
                id="a",
                role="assistant",
                tool_calls=(ToolCall(id="call:1.x", name="bash", arguments='{"cmd": '),),
            ),
            Message(id="t", role="tool", content="bad arguments", tool_call_id="call:1.x"),
            Message(id="u2", role="user", content="try again"),
        ],
        tools=[BASH],
    )

    reply = await complete(provider_for(server.base_url), request)

    assert reply.text == "echo: try again"
    messages = server.requests[0]["messages"]
    assert messages[1]["content"] == [
        # Malformed arguments the loop already answered become an empty input object.
        {"type": "tool_use", "id": "call_1_x", "name": "bash", "input": {}}
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1_x", "content": "bad arguments"},
        {"type": "text", "text": "try again"},
    ]


async def test_params_and_option_defaults(server: FakeAnthropicServer) -> None:
    provider = provider_for(server.base_url, temperature=0.9, maxTokens=100, topK=5)

    await complete(
        provider, ask(temperature=0.1, stop="END", seed=7, presencePenalty=1, custom_field=3)
    )

    body = server.requests[0]
    assert (body["temperature"], body["max_tokens"], body["top_k"]) == (0.1, 100, 5)
    assert body["stop_sequences"] == ["END"]
    assert body["custom_field"] == 3
    # OpenAI-only knobs are dropped, and our own options never reach the API.
    for absent in ("seed", "presencePenalty", "presence_penalty", "maxRetries", "maxTokens"):
        assert absent not in body


async def test_streaming_text_and_tool_use(server: FakeAnthropicServer) -> None:
    server.queue_reply(
        chunks=["I'll ", "check", "."],
        tool_calls=[{"id": "toolu_9", "name": "bash", "arguments": {"cmd": "ls -la /tmp"}}],
        usage=(20, 9),
    )
    seen: list[str] = []

    reply = await complete(provider_for(server.base_url, streaming=True), ask(), seen)

    assert seen == ["I'll ", "check", "."]
    assert reply == ModelReply(
        text="I'll check.",
        tool_calls=(ToolCall(id="toolu_9", name="bash", arguments='{"cmd": "ls -la /tmp"}'),),
        usage=Usage(input_tokens=20, output_tokens=9),
        finish_reason="tool_calls",
    )
    assert server.requests[0]["stream"] is True


async def test_streaming_malformed_tool_input_is_passed_through(
    server: FakeAnthropicServer,
) -> None:
    server.queue_reply(tool_calls=[{"id": "toolu_m", "name": "bash", "arguments": '{"cmd": "l'}])

    reply = await complete(provider_for(server.base_url, streaming=True), ask(), [])

    assert reply.tool_calls == (ToolCall(id="toolu_m", name="bash", arguments='{"cmd": "l'),)


async def test_streaming_tool_use_without_arguments(server: FakeAnthropicServer) -> None:
    server.queue_reply(tool_calls=[{"id": "toolu_e", "name": "now", "arguments": ""}])

    reply = await complete(provider_for(server.base_url, streaming=True), ask(), [])

    assert reply.tool_calls == (ToolCall(id="toolu_e", name="now", arguments="{}"),)


@pytest.mark.parametrize("streaming", [False, True])
async def test_stop_reasons_are_mapped(server: FakeAnthropicServer, streaming: bool) -> None:
    server.queue_reply(text="cut sho", stop_reason="max_tokens")

    reply = await complete(provider_for(server.base_url, streaming=streaming), ask(), [])

    assert (reply.text, reply.finish_reason) == ("cut sho", "length")


async def test_cut_stream_is_a_retryable_interruption(server: FakeAnthropicServer) -> None:
    server.queue_reply(text="one two three four", cut_after=4)

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, streaming=True), ask(), [])

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_STREAM_INTERRUPTED", True)


async def test_overloaded_error_event_mid_stream(server: FakeAnthropicServer) -> None:
    server.queue_reply(text="one two", cut_after=3, stream_error=("overloaded_error", "Overloaded"))

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, streaming=True), ask(), [])

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_UNAVAILABLE", True)
    assert "overloaded" in str(caught.value) and "Overloaded" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "code"),
    [(429, "E_MODEL_RATE_LIMITED"), (500, "E_MODEL_UNAVAILABLE"), (529, "E_MODEL_UNAVAILABLE")],
)
async def test_transient_statuses_are_retryable(
    server: FakeAnthropicServer, status: int, code: str
) -> None:
    server.queue_error(status, "try again later")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), ask())

    assert (caught.value.code, caught.value.retryable) == (code, True)
    assert "try again later" in str(caught.value)
    assert len(server.requests) == 1  # maxRetries 0


async def test_wrong_key_is_an_auth_error_naming_the_variable(
    server: FakeAnthropicServer,
) -> None:
    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, api_key="sk-wrong", maxRetries=3), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_AUTH", False)
    assert "invalid x-api-key" in str(caught.value)
    assert "ANTHROPIC_API_KEY" in str(caught.value)
    assert len(server.requests) == 1  # never retried


async def test_bad_request_surfaces_the_server_message(server: FakeAnthropicServer) -> None:
    server.queue_error(400, "max_tokens: 999999 > 64000, the maximum for this model")

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, maxRetries=3), ask(maxTokens=999999))

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_BAD_REQUEST", False)
    assert "the maximum for this model" in str(caught.value)
    assert len(server.requests) == 1


async def test_prompt_too_long_is_a_context_overflow(server: FakeAnthropicServer) -> None:
    server.queue_context_overflow()

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url, maxRetries=3), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_CONTEXT_OVERFLOW", False)
    assert "prompt is too long: 210000 tokens > 200000 maximum" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("api_key", [None, ""])
def test_missing_key_for_the_public_api_names_the_variable(api_key: str | None) -> None:
    with pytest.raises(ModelError) as caught:
        provider_for(None, api_key=api_key)

    assert caught.value.code == "E_MODEL_AUTH"
    assert "valueFrom.env: ANTHROPIC_API_KEY" in str(caught.value)


async def test_endpoint_with_v1_suffix_works(server: FakeAnthropicServer) -> None:
    reply = await complete(provider_for(server.base_url + "/v1/"), ask("ping"))

    assert reply.text == "echo: ping"


async def test_unreachable_endpoint_names_it() -> None:
    port = closed_port()

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(f"http://127.0.0.1:{port}"), ask())

    assert (caught.value.code, caught.value.retryable) == ("E_MODEL_UNREACHABLE", True)
    assert f"127.0.0.1:{port}" in str(caught.value)


async def test_headers_option_is_sent(server: FakeAnthropicServer) -> None:
    await complete(provider_for(server.base_url, headers={"anthropic-beta": "x-2025"}), ask())

    assert server.request_headers[0]["anthropic-beta"] == "x-2025"
    assert "headers" not in server.requests[0]


async def test_fake_rejects_an_unpaired_tool_use(server: FakeAnthropicServer) -> None:
    # The fake checks pairing as the API does, so the tests above would catch a bad adapter.
    request = ModelRequest(
        messages=[
            Message(id="u", role="user", content="go"),
            Message(id="a", role="assistant", tool_calls=(ToolCall("toolu_1", "bash", "{}"),)),
            Message(id="u2", role="user", content="never mind"),
        ],
        tools=[BASH],
    )

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), request)

    assert caught.value.code == "E_MODEL_BAD_REQUEST"
    assert "without `tool_result` blocks" in str(caught.value)


async def test_thread_server_serves_a_client_on_another_loop() -> None:
    with FakeAnthropicServerThread() as fake:
        fake.queue_reply(tool_calls=[{"name": "bash", "arguments": {"cmd": "pwd"}}])
        provider = provider_for(fake.base_url, streaming=True)
        try:
            first = await provider.complete(ask("where am I?"))
            second = await provider.complete(ask("thanks"))
        finally:
            await provider.aclose()

        assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
            ("bash", {"cmd": "pwd"})
        ]
        assert second.text == "echo: thanks"
        assert fake.pending == 0


# -- prompt caching ---------------------------------------------------------------------------

EPHEMERAL = {"type": "ephemeral"}


async def test_prompt_caching_marks_system_tools_and_stable_history(
    server: FakeAnthropicServer,
) -> None:
    server.queue_reply(text="done", usage=(10, 2), cache_usage=(300, 1200))

    reply = await complete(provider_for(server.base_url, promptCaching=True), tool_round_trip())

    body = server.requests[0]
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": EPHEMERAL}
    ]
    assert body["tools"][-1]["cache_control"] == EPHEMERAL
    user, assistant, results = body["messages"]
    assert all("cache_control" not in block for block in user["content"])
    # The history the previous request sent ends at the assistant's tool calls: read from the
    # cache; the new tool results end what the next request will find cached.
    assert assistant["content"][-1]["cache_control"] == EPHEMERAL
    assert [b.get("cache_control") for b in assistant["content"]] == [None, None, EPHEMERAL]
    assert results["content"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in results["content"][0]
    # Usage counts every prompt token and says how many the cache served or took.
    assert reply.usage == Usage(
        input_tokens=1510, output_tokens=2, cache_read_tokens=1200, cache_creation_tokens=300
    )


async def test_prompt_caching_is_on_by_default_and_can_be_turned_off(
    server: FakeAnthropicServer,
) -> None:
    request = ModelRequest(
        messages=[Message(id="s", role="system", content="Be brief."), *ask().messages],
        tools=[BASH],
    )
    await complete(make_test_provider("anthropic", "claude-test", server.base_url, KEY), request)
    await complete(provider_for(server.base_url, promptCaching=False), request)

    cached, plain = server.requests
    assert cached["system"][0]["cache_control"] == EPHEMERAL
    assert cached["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert plain["system"] == "Be brief."
    assert "cache_control" not in json.dumps(plain)


async def test_streamed_usage_reports_the_cache(server: FakeAnthropicServer) -> None:
    server.queue_reply(text="ok", usage=(5, 1), cache_usage=(0, 900))

    reply = await complete(provider_for(server.base_url, streaming=True, promptCaching=True), ask())

    assert reply.usage == Usage(input_tokens=905, output_tokens=1, cache_read_tokens=900)


# -- extended thinking with tools -------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
async def test_thinking_blocks_are_kept_across_tool_calls(
    server: FakeAnthropicServer, streaming: bool
) -> None:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    server.queue_reply(
        tool_calls=[{"id": "toolu_9", "name": "bash", "arguments": {"cmd": "ls"}}],
        thinking=("I should list the files.", "sig-abc"),
    )
    server.queue_reply(text="There is a.txt.")
    provider = provider_for(server.base_url, streaming=streaming, promptCaching=True)
    try:
        first = await provider.complete(ask("what is here?", thinking=thinking))
        messages = [
            *ask("what is here?").messages,
            Message(
                id="a",
                role="assistant",
                tool_calls=first.tool_calls,
                metadata={"providerState": first.provider_state},
            ),
            Message(id="t", role="tool", content='{"status": "ok"}', tool_call_id="toolu_9"),
        ]
        second = await provider.complete(
            ModelRequest(messages=messages, tools=[BASH], params={"thinking": thinking})
        )
    finally:
        await provider.aclose()

    assert second.text == "There is a.txt."  # the fake refuses a tool loop without the block
    assert first.provider_state == {
        "anthropic": {
            "thinking": [
                {"type": "thinking", "thinking": "I should list the files.", "signature": "sig-abc"}
            ]
        }
    }
    body = server.requests[1]
    assert body["thinking"] == thinking
    assistant = body["messages"][1]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "I should list the files.",
        "signature": "sig-abc",
    }
    assert assistant["content"][1]["type"] == "tool_use"
    assert assistant["content"][-1]["cache_control"] == EPHEMERAL


async def test_fake_refuses_a_tool_loop_without_its_thinking_block(
    server: FakeAnthropicServer,
) -> None:
    request = tool_round_trip()
    request = ModelRequest(
        messages=request.messages,
        tools=request.tools,
        params={"thinking": {"type": "enabled", "budget_tokens": 1024}},
    )

    with pytest.raises(ModelError) as caught:
        await complete(provider_for(server.base_url), request)

    assert "must start with a thinking block" in str(caught.value)
