"""http-fetch: get and post against a local server (allowed through the guard's allow-list),
truncation, redirects, timeouts and errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from base_tools.http_fetch import handlers
from goondan import ToolContext, ToolError
from tests.unit.base_tools.local_http import LocalServer

get, post = handlers["get"], handlers["post"]


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LocalServer]:
    monkeypatch.setenv("GOONDAN_HTTP_ALLOW_HOSTS", "127.0.0.1")
    async with LocalServer() as local:
        yield local


async def test_get(ctx: ToolContext, server: LocalServer) -> None:
    out = await get(ctx, {"url": f"{server.url}/hello"})
    assert out["url"] == f"{server.url}/hello"
    assert (out["method"], out["status"], out["statusText"]) == ("GET", 200, "OK")
    assert out["body"] == "hello" and out["truncated"] is False
    assert out["headers"]["x-test"] == "1" and out["headers"]["content-length"] == "5"
    assert isinstance(out["durationMs"], int)
    assert set(out) == {
        "url",
        "method",
        "status",
        "statusText",
        "headers",
        "body",
        "truncated",
        "durationMs",
    }


async def test_get_non_2xx_is_a_result(ctx: ToolContext, server: LocalServer) -> None:
    out = await get(ctx, {"url": f"{server.url}/status/404"})
    assert (out["status"], out["statusText"], out["body"]) == (404, "Not Found", "status")


async def test_body_truncated_at_max_bytes(ctx: ToolContext, server: LocalServer) -> None:
    out = await get(ctx, {"url": f"{server.url}/big", "maxBytes": 100})
    assert out["body"] == "x" * 100 and out["truncated"] is True
    full = await get(ctx, {"url": f"{server.url}/big"})
    assert len(full["body"]) == 10_000 and full["truncated"] is False


async def test_charset_is_honoured(ctx: ToolContext, server: LocalServer) -> None:
    assert (await get(ctx, {"url": f"{server.url}/latin1"}))["body"] == "café"


async def test_post_json_body(ctx: ToolContext, server: LocalServer) -> None:
    out = await post(
        ctx, {"url": f"{server.url}/echo", "body": {"k": [1, "v"]}, "headers": {"X-Auth": "abc"}}
    )
    echoed = json.loads(out["body"])
    assert out["method"] == "POST" and out["status"] == 200
    assert echoed == {
        "method": "POST",
        "contentType": "application/json",
        "auth": "abc",
        "body": '{"k": [1, "v"]}',
    }


async def test_post_body_string_and_own_content_type(ctx: ToolContext, server: LocalServer) -> None:
    out = await post(
        ctx,
        {
            "url": f"{server.url}/echo",
            "bodyString": "a=1",
            "headers": {"content-type": "application/x-www-form-urlencoded"},
        },
    )
    assert json.loads(out["body"])["body"] == "a=1"
    assert json.loads(out["body"])["contentType"] == "application/x-www-form-urlencoded"
    empty = await post(ctx, {"url": f"{server.url}/echo"})
    assert json.loads(empty["body"])["body"] == ""


async def test_redirects_are_followed_and_reported(ctx: ToolContext, server: LocalServer) -> None:
    out = await get(ctx, {"url": f"{server.url}/redirect?to=/json"})
    assert out["url"] == f"{server.url}/json" and json.loads(out["body"]) == {"a": [1, 2]}


async def test_redirect_count_is_capped(
    ctx: ToolContext, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOONDAN_HTTP_MAX_REDIRECTS", "3")
    with pytest.raises(ToolError) as info:
        await get(ctx, {"url": f"{server.url}/loop"})
    assert info.value.code == "E_HTTP_TOO_MANY_REDIRECTS"
    assert server.hits.count("/loop") == 4  # the request and three redirects


async def test_redirect_to_another_scheme_is_refused(ctx: ToolContext, server: LocalServer) -> None:
    with pytest.raises(ToolError) as info:
        await get(ctx, {"url": f"{server.url}/redirect?to=file:///etc/passwd"})
    assert info.value.code in {"E_HTTP_UNSUPPORTED_PROTOCOL", "E_HTTP_REQUEST_FAILED"}


async def test_timeout(ctx: ToolContext, server: LocalServer) -> None:
    with pytest.raises(ToolError) as info:
        await get(ctx, {"url": f"{server.url}/slow", "timeoutMs": 200})
    assert info.value.code == "E_HTTP_TIMEOUT" and "200 ms" in str(info.value)


async def test_connection_refused(ctx: ToolContext, server: LocalServer) -> None:
    await server.__aexit__()
    with pytest.raises(ToolError) as info:
        await get(ctx, {"url": f"{server.url}/hello"})
    assert info.value.code == "E_HTTP_REQUEST_FAILED"
    await server.__aenter__()  # the fixture closes it again


@pytest.mark.parametrize(
    "url, code",
    [
        ("ftp://example.com/file", "E_HTTP_UNSUPPORTED_PROTOCOL"),
        ("file:///etc/passwd", "E_HTTP_UNSUPPORTED_PROTOCOL"),
        ("example.com/no-scheme", "E_HTTP_UNSUPPORTED_PROTOCOL"),
        ("http://", "E_HTTP_INVALID_URL"),
        ("http://[::1/", "E_HTTP_INVALID_URL"),
    ],
)
async def test_bad_urls_never_leave_the_process(ctx: ToolContext, url: str, code: str) -> None:
    with pytest.raises(ToolError) as info:
        await get(ctx, {"url": url})
    assert info.value.code == code
    if code == "E_HTTP_UNSUPPORTED_PROTOCOL":
        assert str(info.value).startswith("Unsupported protocol")
