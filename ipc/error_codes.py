"""Every error code goondan puts on the wire, in a result, a log line or an HTTP answer.

A code is a plain string on the wire (`ErrorInfo.code`, a tool's `ToolErrorInfo.code`): the
members are `StrEnum`s, so they compare, encode and print as the string itself. Upstream
Goondan's names are kept, hence the few codes without the `E_` prefix. `docs/errors.md` is
generated from this module (`python -m ipc.error_codes > docs/errors.md`); a test keeps the
two in step, and another fails on a code-like string literal anywhere else in the packages.
"""

from __future__ import annotations

import sys
from enum import StrEnum

AREAS = {
    "request": "Requests between agents, and their routing",
    "daemon": "The daemon, its control socket and its processes",
    "storage": "State on disk",
    "connector": "Connectors and ingress",
    "bundle": "Bundle loading and validation",
    "model": "Models",
    "turn": "Turns and steps",
    "tool": "Tool calls (the runtime)",
    "base_tools": "Built-in tools",
    "extension": "Extensions",
}


class ErrorCode(StrEnum):
    area: str
    meaning: str

    def __new__(cls, value: str, area: str, meaning: str) -> ErrorCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.area = area
        member.meaning = meaning
        return member

    # -- requests between agents, and their routing ----------------------------------------
    AGENT_NOT_FOUND = "AGENT_NOT_FOUND", "request", "The target agent is not in this swarm."
    AGENT_REQUEST_ERROR = (
        "AGENT_REQUEST_ERROR",
        "request",
        "A request to another agent failed, with no more specific code.",
    )
    AGENT_REQUEST_TIMEOUT = (
        "AGENT_REQUEST_TIMEOUT",
        "request",
        "The request was not answered within its timeout.",
    )
    CIRCULAR_CALL_DETECTED = (
        "CIRCULAR_CALL_DETECTED",
        "request",
        "The request would reach an agent already in its call chain.",
    )
    IPC_DELIVERY_FAILED = (
        "IPC_DELIVERY_FAILED",
        "request",
        "The orchestrator could not hand the request to the target's process.",
    )
    MESSAGE_TOO_LARGE = (
        "MESSAGE_TOO_LARGE",
        "request",
        "A request or answer is over the wire's message size limit.",
    )
    E_AGENT_CRASHED = (
        "E_AGENT_CRASHED",
        "request",
        "The target agent's process crashed while handling the request, or keeps crashing "
        "at start-up.",
    )
    E_AGENT_STOPPED = (
        "E_AGENT_STOPPED",
        "request",
        "The target agent's process stopped while handling the request.",
    )
    E_AGENT_START = "E_AGENT_START", "request", "The target agent cannot start."
    E_BAD_REQUEST = (
        "E_BAD_REQUEST",
        "request",
        "A request or control command whose payload or args cannot be decoded.",
    )
    E_CANCELLED = "E_CANCELLED", "request", "An asynchronous request was cancelled."
    E_INTERRUPTED = (
        "E_INTERRUPTED",
        "request",
        "A `goondan run --input` turn was interrupted by a stop.",
    )
    E_SHUTTING_DOWN = (
        "E_SHUTTING_DOWN",
        "request",
        "The orchestrator is stopping and takes no new request.",
    )
    E_UNKNOWN = "E_UNKNOWN", "request", "An error that came without a code."

    # -- the daemon, its control socket and its processes ----------------------------------
    E_AGENT_GONE = (
        "E_AGENT_GONE",
        "daemon",
        "A command for an agent process that is not running.",
    )
    E_APPROVAL_NOT_FOUND = (
        "E_APPROVAL_NOT_FOUND",
        "daemon",
        "`goondan approve` / `deny` named no waiting approval (unknown, decided or expired).",
    )
    E_CONFIG = "E_CONFIG", "daemon", "`goondan restart` found the bundle invalid; nothing changed."
    E_INSTANCE_BUSY = (
        "E_INSTANCE_BUSY",
        "daemon",
        "An agent could not drop an instance being deleted.",
    )
    E_INTERNAL = (
        "E_INTERNAL",
        "daemon",
        "A bug: a command or an event failed unexpectedly (see the daemon's log).",
    )
    E_TIMEOUT = "E_TIMEOUT", "daemon", "An operation did not finish within its time limit."
    E_UNKNOWN_COMMAND = "E_UNKNOWN_COMMAND", "daemon", "A control command nobody knows."
    INSTANCE_NOT_FOUND = (
        "INSTANCE_NOT_FOUND",
        "daemon",
        "`goondan instance delete` found no such instance.",
    )

    # -- state on disk ---------------------------------------------------------------------
    E_BAD_INSTANCE_KEY = (
        "E_BAD_INSTANCE_KEY",
        "storage",
        "An instance key that cannot name a directory.",
    )
    E_STORAGE = (
        "E_STORAGE",
        "storage",
        "State could not be written (disk full, permissions); the input was refused.",
    )

    # -- connectors and ingress ------------------------------------------------------------
    E_BAD_PAYLOAD = "E_BAD_PAYLOAD", "connector", "An HTTP ingress body that is not an event."
    E_BAD_SIGNATURE = (
        "E_BAD_SIGNATURE",
        "connector",
        "An HTTP ingress request whose signature does not verify.",
    )
    E_BODY_TIMEOUT = (
        "E_BODY_TIMEOUT",
        "connector",
        "An HTTP ingress request whose body did not arrive in time.",
    )
    E_CONNECTOR = "E_CONNECTOR", "connector", "A connector failed, with no more specific code."
    E_CONNECTOR_CONFIG = (
        "E_CONNECTOR_CONFIG",
        "connector",
        "A Connection's config or secrets are invalid.",
    )
    E_CONNECTOR_START = "E_CONNECTOR_START", "connector", "A connector process cannot start."
    E_EVENT_ACK_TIMEOUT = (
        "E_EVENT_ACK_TIMEOUT",
        "connector",
        "The orchestrator did not acknowledge a connector's event in time.",
    )
    E_EVENT_REFUSED = (
        "E_EVENT_REFUSED",
        "connector",
        "The orchestrator refused a connector's event.",
    )
    E_NO_CONNECTION = (
        "E_NO_CONNECTION",
        "connector",
        "An event from a connector process whose Connection is not in the swarm.",
    )
    E_NO_ROUTE = "E_NO_ROUTE", "connector", "No ingress rule of the Connection matches the event."
    E_REPLAYED = (
        "E_REPLAYED",
        "connector",
        "A signed HTTP ingress request that was already taken.",
    )
    E_REPLY_FAILED = (
        "E_REPLY_FAILED",
        "connector",
        "The agent's answer to an event that asked for a reply was an error.",
    )
    E_REPLY_TIMEOUT = (
        "E_REPLY_TIMEOUT",
        "connector",
        "The answer to an event that asked for a reply did not come in time.",
    )
    E_STALE_TIMESTAMP = (
        "E_STALE_TIMESTAMP",
        "connector",
        "A signed HTTP ingress request outside the timestamp tolerance.",
    )

    # -- bundle loading and validation -----------------------------------------------------
    FILE_NOT_FOUND = "FILE_NOT_FOUND", "bundle", "A bundle file that does not exist."
    E_CONFIG_CONNECTOR_NO_MAIN = (
        "E_CONFIG_CONNECTOR_NO_MAIN",
        "bundle",
        "A Connector entry without `async def main(ctx)` (deep validation).",
    )
    E_CONFIG_DUPLICATE_NAME = (
        "E_CONFIG_DUPLICATE_NAME",
        "bundle",
        "Two resources of one kind share a name.",
    )
    E_CONFIG_ENTRY_IMPORT = (
        "E_CONFIG_ENTRY_IMPORT",
        "bundle",
        "A tool, extension or connector entry whose import raised (deep validation).",
    )
    E_CONFIG_ENTRY_NOT_FOUND = (
        "E_CONFIG_ENTRY_NOT_FOUND",
        "bundle",
        "A tool, extension or connector entry (or a prompt file) that does not exist.",
    )
    E_CONFIG_ENTRY_SYNTAX = (
        "E_CONFIG_ENTRY_SYNTAX",
        "bundle",
        "A tool, extension or connector entry (or a module it imports) with a SyntaxError.",
    )
    E_CONFIG_ENTRY_TIMEOUT = (
        "E_CONFIG_ENTRY_TIMEOUT",
        "bundle",
        "A tool, extension or connector entry whose import did not finish in time.",
    )
    E_CONFIG_EXTENSION_NO_REGISTER = (
        "E_CONFIG_EXTENSION_NO_REGISTER",
        "bundle",
        "An Extension entry without `register(api, config)` (deep validation).",
    )
    E_CONFIG_FILE_TOO_LARGE = (
        "E_CONFIG_FILE_TOO_LARGE",
        "bundle",
        "A bundle file over the size limit.",
    )
    E_CONFIG_HANDLER_MISSING = (
        "E_CONFIG_HANDLER_MISSING",
        "bundle",
        "A Tool export with no handler in the entry's `handlers` (deep validation).",
    )
    E_CONFIG_HANDLER_UNDECLARED = (
        "E_CONFIG_HANDLER_UNDECLARED",
        "bundle",
        "A warning: a Tool handler that no export declares, so no model can call it.",
    )
    E_CONFIG_INVALID_NAME = (
        "E_CONFIG_INVALID_NAME",
        "bundle",
        "A resource name that is not allowed.",
    )
    E_CONFIG_INVALID_REF = "E_CONFIG_INVALID_REF", "bundle", "A malformed reference to a resource."
    E_CONFIG_NOT_A_REGULAR_FILE = (
        "E_CONFIG_NOT_A_REGULAR_FILE",
        "bundle",
        "A bundle path that is not a regular file.",
    )
    E_CONFIG_PACKAGE_DOC_DUPLICATED = (
        "E_CONFIG_PACKAGE_DOC_DUPLICATED",
        "bundle",
        "More than one Package document.",
    )
    E_CONFIG_PACKAGE_DOC_POSITION = (
        "E_CONFIG_PACKAGE_DOC_POSITION",
        "bundle",
        "A Package document that is not the first document.",
    )
    E_CONFIG_PACKAGE_NOT_INSTALLED = (
        "E_CONFIG_PACKAGE_NOT_INSTALLED",
        "bundle",
        "A referenced package that is not installed.",
    )
    E_CONFIG_PACKAGE_VERSION_MISMATCH = (
        "E_CONFIG_PACKAGE_VERSION_MISMATCH",
        "bundle",
        "An installed package whose version is outside the range a dependency asks for.",
    )
    E_CONFIG_PACKAGE_LOCK_MISMATCH = (
        "E_CONFIG_PACKAGE_LOCK_MISMATCH",
        "bundle",
        "goondan.lock.yaml names a package version that is not the one installed.",
    )
    E_CONFIG_PARSE_ERROR = "E_CONFIG_PARSE_ERROR", "bundle", "A bundle file that is not valid YAML."
    E_CONFIG_PATH_OUTSIDE_BUNDLE = (
        "E_CONFIG_PATH_OUTSIDE_BUNDLE",
        "bundle",
        "A path that leads outside the bundle's directory.",
    )
    E_CONFIG_REF_NOT_FOUND = (
        "E_CONFIG_REF_NOT_FOUND",
        "bundle",
        "A reference to a resource that does not exist.",
    )
    E_CONFIG_SCHEMA_INVALID = (
        "E_CONFIG_SCHEMA_INVALID",
        "bundle",
        "A resource that does not match its kind's schema.",
    )
    E_CONFIG_TOO_MANY_DOCUMENTS = (
        "E_CONFIG_TOO_MANY_DOCUMENTS",
        "bundle",
        "A bundle file with more documents than allowed.",
    )
    E_CONFIG_UNKNOWN_KIND = "E_CONFIG_UNKNOWN_KIND", "bundle", "A resource of an unknown kind."
    E_CONFIG_UNSUPPORTED_API_VERSION = (
        "E_CONFIG_UNSUPPORTED_API_VERSION",
        "bundle",
        "A resource with an apiVersion other than `goondan.ai/v1`.",
    )

    # -- models ----------------------------------------------------------------------------
    E_CONTEXT_OVERFLOW = (
        "E_CONTEXT_OVERFLOW",
        "model",
        "The conversation is longer than the model's context window, even after compaction.",
    )
    E_MODEL = "E_MODEL", "model", "A model call failed, with no more specific code."
    E_MODEL_AUTH = "E_MODEL_AUTH", "model", "The provider refused the API key (or it is unset)."
    E_MODEL_BAD_REQUEST = (
        "E_MODEL_BAD_REQUEST",
        "model",
        "The provider refused the request as malformed.",
    )
    E_MODEL_CONFIG = "E_MODEL_CONFIG", "model", "A Model resource's options are invalid."
    E_MODEL_EMPTY_OUTPUT = (
        "E_MODEL_EMPTY_OUTPUT",
        "model",
        "The model kept answering with nothing.",
    )
    E_MODEL_MALFORMED_OUTPUT = (
        "E_MODEL_MALFORMED_OUTPUT",
        "model",
        "The model kept answering with output that cannot be read (e.g. bad tool-call JSON).",
    )
    E_MODEL_RATE_LIMITED = "E_MODEL_RATE_LIMITED", "model", "The provider's rate limit was hit."
    E_MODEL_STREAM_INTERRUPTED = (
        "E_MODEL_STREAM_INTERRUPTED",
        "model",
        "The model's streamed answer broke off.",
    )
    E_MODEL_TIMEOUT = "E_MODEL_TIMEOUT", "model", "The model did not answer in time."
    E_MODEL_UNAVAILABLE = (
        "E_MODEL_UNAVAILABLE",
        "model",
        "The provider is overloaded or unavailable.",
    )
    E_MODEL_UNREACHABLE = (
        "E_MODEL_UNREACHABLE",
        "model",
        "The provider cannot be reached (network).",
    )

    # -- turns and steps -------------------------------------------------------------------
    E_MESSAGE_TARGET_NOT_FOUND = (
        "E_MESSAGE_TARGET_NOT_FOUND",
        "turn",
        "An extension's message event names a message that is not in the conversation.",
    )
    E_STEP_FAILED = "E_STEP_FAILED", "turn", "A step of a turn failed."
    E_TURN_BUDGET = "E_TURN_BUDGET", "turn", "A turn used up its step budget."
    E_TURN_CANCELLED = (
        "E_TURN_CANCELLED",
        "turn",
        "A turn was cancelled (`goondan cancel`, or Ctrl-C on `goondan send`).",
    )
    E_TURN_FAILED = "E_TURN_FAILED", "turn", "A turn failed."

    # -- tool calls (the runtime) ----------------------------------------------------------
    E_TOOL = "E_TOOL", "tool", "A tool failed, with no more specific code."
    E_TOOL_APPROVAL_TIMEOUT = (
        "E_TOOL_APPROVAL_TIMEOUT",
        "tool",
        "A call that needs a human's approval was not decided within approvalTimeoutSeconds.",
    )
    E_TOOL_BAD_OUTPUT = (
        "E_TOOL_BAD_OUTPUT",
        "tool",
        "A pending tool's job finished with output that cannot be used.",
    )
    E_TOOL_CALL_TRUNCATED = (
        "E_TOOL_CALL_TRUNCATED",
        "tool",
        "The model's tool call was cut off by its output limit.",
    )
    E_TOOL_CANCELLED = "E_TOOL_CANCELLED", "tool", "A tool call was cancelled."
    E_TOOL_DENIED = "E_TOOL_DENIED", "tool", "A human denied a call that needed approval."
    E_TOOL_INTERRUPTED = (
        "E_TOOL_INTERRUPTED",
        "tool",
        "A pending tool's job was interrupted (the process restarted).",
    )
    E_TOOL_INVALID_ARGS = (
        "E_TOOL_INVALID_ARGS",
        "tool",
        "A tool call's arguments do not match the tool's schema.",
    )
    E_TOOL_JOB_NOT_FOUND = (
        "E_TOOL_JOB_NOT_FOUND",
        "tool",
        "No pending job with that handle in this conversation.",
    )
    E_TOOL_LOOP_DETECTED = (
        "E_TOOL_LOOP_DETECTED",
        "tool",
        "The model repeats the same tool call; it was not run again.",
    )
    E_TOOL_MCP = (
        "E_TOOL_MCP",
        "tool",
        "An MCP server's tool reported an error (isError), or the server could not start or "
        "died during the call.",
    )
    E_TOOL_MIDDLEWARE = "E_TOOL_MIDDLEWARE", "tool", "A toolCall middleware raised."
    E_TOOL_NOT_FOUND = "E_TOOL_NOT_FOUND", "tool", "No tool of that name."
    E_TOOL_NOT_IN_CATALOG = (
        "E_TOOL_NOT_IN_CATALOG",
        "tool",
        "A tool that exists but is not offered to this agent.",
    )
    E_TOOL_PENDING_DUPLICATE = (
        "E_TOOL_PENDING_DUPLICATE",
        "tool",
        "A pending tool call that duplicates one already running.",
    )
    E_TOOL_PENDING_UNSUPPORTED = (
        "E_TOOL_PENDING_UNSUPPORTED",
        "tool",
        "A tool returned a pending job where none can run.",
    )
    E_TOOL_POLICY = "E_TOOL_POLICY", "tool", "A tool's own policy refused the call."
    E_TOOL_POLICY_DENIED = (
        "E_TOOL_POLICY_DENIED",
        "tool",
        "The request's tool policy does not allow the tool.",
    )
    E_TOOL_SANDBOX = "E_TOOL_SANDBOX", "tool", "The tool sandbox cannot run the command."
    E_TOOL_STILL_RUNNING = (
        "E_TOOL_STILL_RUNNING",
        "tool",
        "Timed-out calls of a sync tool still hold its threads.",
    )
    E_TOOL_TIMEOUT = "E_TOOL_TIMEOUT", "tool", "A tool call did not finish within its timeout."

    # -- built-in tools --------------------------------------------------------------------
    E_DOWNLOAD_FAILED = "E_DOWNLOAD_FAILED", "base_tools", "A file could not be downloaded."
    E_EXEC_FAILED = "E_EXEC_FAILED", "base_tools", "A command could not be started."
    E_EXISTS = "E_EXISTS", "base_tools", "The path already exists."
    E_FILE_TOO_LARGE = "E_FILE_TOO_LARGE", "base_tools", "A file over the size allowed."
    E_HTTP_BLOCKED = (
        "E_HTTP_BLOCKED",
        "base_tools",
        "An HTTP request to a host the network guard does not allow.",
    )
    E_HTTP_INVALID_URL = "E_HTTP_INVALID_URL", "base_tools", "A URL that cannot be parsed."
    E_HTTP_REQUEST_FAILED = "E_HTTP_REQUEST_FAILED", "base_tools", "An HTTP request failed."
    E_HTTP_TIMEOUT = "E_HTTP_TIMEOUT", "base_tools", "An HTTP request timed out."
    E_HTTP_TOO_MANY_REDIRECTS = (
        "E_HTTP_TOO_MANY_REDIRECTS",
        "base_tools",
        "An HTTP request followed too many redirects.",
    )
    E_HTTP_UNSUPPORTED_PROTOCOL = (
        "E_HTTP_UNSUPPORTED_PROTOCOL",
        "base_tools",
        "A URL whose scheme is not http or https.",
    )
    E_INVALID_JSON = "E_INVALID_JSON", "base_tools", "Input that is not valid JSON."
    E_INVALID_PATH = "E_INVALID_PATH", "base_tools", "A JSON path that cannot be parsed."
    E_IO = "E_IO", "base_tools", "A file operation failed."
    E_IS_DIRECTORY = "E_IS_DIRECTORY", "base_tools", "A directory where a file was expected."
    E_JSON_TYPE = "E_JSON_TYPE", "base_tools", "A JSON value of the wrong type for the operation."
    E_NOT_A_DIRECTORY = "E_NOT_A_DIRECTORY", "base_tools", "A file where a directory was expected."
    E_NOT_FOUND = "E_NOT_FOUND", "base_tools", "A file or script that does not exist."
    E_PATH_OUTSIDE_WORKDIR = (
        "E_PATH_OUTSIDE_WORKDIR",
        "base_tools",
        "A path outside the instance's work directory.",
    )
    E_PERMISSION = "E_PERMISSION", "base_tools", "Permission denied."
    E_RATE_LIMITED = "E_RATE_LIMITED", "base_tools", "A chat service's rate limit was hit."
    E_REQUEST_FAILED = "E_REQUEST_FAILED", "base_tools", "A chat service request failed."
    E_SLACK_API = "E_SLACK_API", "base_tools", "Slack's API answered with an error."
    E_TELEGRAM_API = "E_TELEGRAM_API", "base_tools", "Telegram's Bot API answered with an error."
    E_TOKEN_MISSING = "E_TOKEN_MISSING", "base_tools", "No bot token was given or set."
    E_TOKEN_SCOPE = (
        "E_TOKEN_SCOPE",
        "base_tools",
        "The environment's bot token would be sent to another API base URL.",
    )
    E_TOOL_SEARCH_QUERY = "E_TOOL_SEARCH_QUERY", "base_tools", "A tool search without a query."

    # -- extensions ------------------------------------------------------------------------
    E_EXT_CONFIG = "E_EXT_CONFIG", "extension", "An extension's config is invalid."
    E_EXT_INIT = "E_EXT_INIT", "extension", "An extension's register function raised."
    E_EXT_LOAD = "E_EXT_LOAD", "extension", "An extension's module cannot be imported."


def markdown() -> str:
    """The page `docs/errors.md`: every code and its meaning, by area."""
    lines = [
        "# Error codes",
        "",
        "<!-- Generated by `python -m ipc.error_codes > docs/errors.md`: edit"
        " ipc/error_codes.py, not this page. -->",
        "",
        "Every error goondan reports carries one of these codes: in a `delegate_result` or",
        "`control_reply` on the wire, in a tool's result that the model sees, in `goondan send`'s",
        "output, in an HTTP ingress answer and in the logs. The codes without the `E_` prefix",
        "keep upstream Goondan's names.",
    ]
    for area, title in AREAS.items():
        lines += ["", f"## {title}", "", "| Code | Meaning |", "| --- | --- |"]
        lines += [f"| `{code.value}` | {code.meaning} |" for code in ErrorCode if code.area == area]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
