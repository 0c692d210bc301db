"""What the telegram and slack tools share: where to send, with which token, how to wait out a
429, and what to do with a downloaded file.

Token and base URL: the call's `token`, else the first set env name; the call's `apiBaseUrl`,
else the env base URL, else the public API. A token from the environment is only ever sent to
the configured base URL (env or default): a call that points `apiBaseUrl` elsewhere must bring
its own `token`, so a prompt-injected URL cannot collect the operator's token.

Rate limits: a 429 whose wait (Retry-After header or Telegram's `parameters.retry_after`) is at
most RATE_LIMIT_MAX_WAIT_SECONDS is waited out and retried, up to RATE_LIMIT_RETRIES times and
within the call's timeout; a longer one is returned as an `E_RATE_LIMITED` error saying how long.
"""

from __future__ import annotations

import asyncio
import base64
import json
import mimetypes
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from base_tools._http import guarded_client
from base_tools._workspace import resolve_path
from goondan import ErrorCode, ToolContext, ToolError

RATE_LIMIT_MAX_WAIT_SECONDS = 5.0
RATE_LIMIT_RETRIES = 2
API_BODY_LIMIT = 5_000_000  # an API answer (not a file) larger than this is not an answer
DEFAULT_TIMEOUT_MS = 15_000
DEFAULT_DOWNLOAD_BYTES = 3_000_000
MAX_DOWNLOAD_BYTES = 20_000_000


@dataclass(frozen=True)
class Service:
    name: str  # "telegram"
    token_envs: tuple[str, ...]
    base_url_env: str
    default_base_url: str


@dataclass(frozen=True)
class Target:
    token: str
    base_url: str  # no trailing slash


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: httpx.Headers
    body: Any  # parsed JSON, or None when the body was not JSON


def target(service: Service, args: dict[str, Any]) -> Target:
    configured = (os.environ.get(service.base_url_env) or service.default_base_url).rstrip("/")
    requested = (args.get("apiBaseUrl") or "").strip().rstrip("/")
    base_url = requested or configured
    if not base_url.startswith(("http://", "https://")):
        raise ToolError(
            f"[{service.name}] apiBaseUrl must be an http(s) URL, got {base_url!r}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    token = (args.get("token") or "").strip()
    if token:
        return Target(token, base_url)
    env_token = next(
        (os.environ[name] for name in service.token_envs if os.environ.get(name, "").strip()), None
    )
    if env_token is None:
        raise ToolError(
            f"[{service.name}] bot token not found: pass 'token' or set one of "
            f"{', '.join(service.token_envs)}",
            code=ErrorCode.E_TOKEN_MISSING,
            suggestion=f"the operator sets {service.token_envs[0]} in the agent's environment",
        )
    if base_url != configured:
        raise ToolError(
            f"[{service.name}] refusing to send the token from the environment to "
            f"{base_url}: only {configured} receives it",
            code=ErrorCode.E_TOKEN_SCOPE,
            suggestion=f"leave apiBaseUrl out; the operator may set {service.base_url_env}",
        )
    return Target(env_token.strip(), base_url)


def timeout_ms(args: dict[str, Any]) -> int:
    return int(args.get("timeoutMs", DEFAULT_TIMEOUT_MS))


def redact(text: str, token: str) -> str:
    return text.replace(token, "<token>") if token else text


Send = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]


async def call(service: Service, method: str, token: str, timeout: int, send: Send) -> Answer:
    """Run `send` (retrying short 429 waits); the answer's JSON body, or a tool error."""
    deadline = time.monotonic() + timeout / 1000
    try:
        async with asyncio.timeout(timeout / 1000):
            async with guarded_client(timeout / 1000) as client:
                for attempt in range(RATE_LIMIT_RETRIES + 1):
                    answer = await _exchange(client, send)
                    wait = retry_after(answer)
                    if (
                        answer.status == 429
                        and attempt < RATE_LIMIT_RETRIES
                        and wait is not None
                        and wait <= RATE_LIMIT_MAX_WAIT_SECONDS
                        and time.monotonic() + wait < deadline
                    ):
                        await asyncio.sleep(wait)
                        continue
                    return answer
    except (TimeoutError, httpx.TimeoutException):
        raise ToolError(
            f"[{service.name}] {method} request timed out after {timeout}ms",
            code=ErrorCode.E_TIMEOUT,
            suggestion="retry later",
        ) from None
    except httpx.HTTPError as exc:
        raise ToolError(
            f"[{service.name}] {method} request failed: "
            f"{redact(f'{type(exc).__name__}: {exc}', token)}",
            code=ErrorCode.E_REQUEST_FAILED,
        ) from None
    raise AssertionError("unreachable")


async def _exchange(client: httpx.AsyncClient, send: Send) -> Answer:
    response = await send(client)
    try:
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > API_BODY_LIMIT:
                break
    finally:
        await response.aclose()
    try:
        body = json.loads(bytes(data)) if data else None
    except ValueError:
        body = None
    return Answer(response.status_code, response.reason_phrase, response.headers, body)


def retry_after(answer: Answer) -> float | None:
    """Seconds to wait, from a Retry-After header or Telegram's `parameters.retry_after`."""
    header = answer.headers.get("retry-after")
    if header is not None:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass
    if isinstance(answer.body, dict) and isinstance(answer.body.get("parameters"), dict):
        value = answer.body["parameters"].get("retry_after")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return max(0.0, float(value))
    return None


def rate_limited(service: Service, failure: str, answer: Answer) -> ToolError:
    """`failure` is "<method> failed...": the error names the wait when the API gave one."""
    wait = retry_after(answer)
    after = (
        f" (retry after {wait:g} s)"
        if wait is not None and "retry after" not in failure.lower()
        else ""
    )
    return ToolError(
        f"[{service.name}] {failure}{after}",
        code=ErrorCode.E_RATE_LIMITED,
        suggestion=(
            f"wait {wait:g} seconds (wait__seconds) before calling it again"
            if wait is not None
            else "wait a while before calling it again"
        ),
    )


def http_description(answer: Answer) -> str:
    return f"HTTP {answer.status} {answer.reason}".rstrip()


# --- downloads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Download:
    url: str
    status: int
    headers: httpx.Headers
    data: bytes


def download_limit(args: dict[str, Any]) -> int:
    limit = int(args.get("maxBytes", DEFAULT_DOWNLOAD_BYTES))
    if not 1 <= limit <= MAX_DOWNLOAD_BYTES:
        raise ToolError(
            f"maxBytes must be between 1 and {MAX_DOWNLOAD_BYTES}, got {limit}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    return limit


async def download(
    service: Service,
    url: str,
    headers: dict[str, str],
    *,
    token: str,
    timeout: int,
    max_bytes: int,
    what: str,
) -> Download:
    """GET `url` (guarded, redirects followed) refusing bodies over `max_bytes`."""
    shown = redact(url, token)
    try:
        async with asyncio.timeout(timeout / 1000):
            async with guarded_client(timeout / 1000) as client:
                async with client.stream("GET", url, headers=headers) as response:
                    if response.status_code >= 400:
                        raise ToolError(
                            f"[{service.name}] {what} failed: HTTP {response.status_code} "
                            f"{response.reason_phrase} for {shown}",
                            code=ErrorCode.E_DOWNLOAD_FAILED,
                        )
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > max_bytes:
                        raise too_large(service, what, int(declared), max_bytes)
                    data = bytearray()
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > max_bytes:
                            raise too_large(service, what, None, max_bytes)
                    return Download(
                        redact(str(response.url), token),
                        response.status_code,
                        response.headers,
                        bytes(data),
                    )
    except (TimeoutError, httpx.TimeoutException):
        raise ToolError(
            f"[{service.name}] {what} timed out after {timeout}ms", code=ErrorCode.E_TIMEOUT
        ) from None
    except httpx.HTTPError as exc:
        raise ToolError(
            f"[{service.name}] {what} failed: {redact(f'{type(exc).__name__}: {exc}', token)}",
            code=ErrorCode.E_DOWNLOAD_FAILED,
        ) from None


def too_large(service: Service, what: str, size: int | None, max_bytes: int) -> ToolError:
    size_text = f"{size} bytes" if size is not None else "more than that"
    return ToolError(
        f"[{service.name}] {what}: the file is {size_text}, over maxBytes {max_bytes}",
        code=ErrorCode.E_FILE_TOO_LARGE,
        suggestion=f"raise maxBytes (at most {MAX_DOWNLOAD_BYTES})",
    )


def content_type_of(headers: httpx.Headers, name_hint: str) -> str:
    declared = str(headers.get("content-type", "")).split(";", 1)[0].strip()
    if declared and declared != "application/octet-stream":
        return declared
    return mimetypes.guess_type(name_hint)[0] or declared or "application/octet-stream"


def file_payload(
    ctx: ToolContext, data: bytes, content_type: str, args: dict[str, Any]
) -> dict[str, Any]:
    """`savedPath`, `base64` and `dataUrl` as the call asked (save path inside the workdir)."""
    saved = None
    save_to = args.get("savePath") or args.get("outputPath")
    if save_to:
        path = resolve_path(ctx.workdir, save_to, what="savePath")
        if path.is_dir():
            raise ToolError(
                f"savePath {save_to!r} is a directory",
                code=ErrorCode.E_IS_DIRECTORY,
                suggestion="give a file name inside it",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        saved = str(path)
    encoded = base64.b64encode(data).decode("ascii")
    return {
        "savedPath": saved,
        "base64": encoded if args.get("includeBase64", True) else None,
        "dataUrl": (
            f"data:{content_type};base64,{encoded}" if args.get("includeDataUrl", True) else None
        ),
    }


def first_text(args: dict[str, Any], names: Sequence[str]) -> str | None:
    for name in names:
        value = args.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None
