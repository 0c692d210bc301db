"""Connector secrets never reach the logs: the structlog processor, and it installed."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import structlog

from goondan.connectors import REDACTED, SecretRedactor, install_redaction
from goondan.logs import configure_logging

SECRET = "xoxb-1234:secret/value"


def test_every_field_nested_value_and_url_form_is_redacted() -> None:
    redactor = SecretRedactor([SECRET, ""])
    event = redactor(
        None,
        "info",
        {
            "event": f"calling https://api/{quote(SECRET, safe='')}/x",
            "token": SECRET,
            "nested": {"list": [f"Bearer {SECRET}", 3, None, True], "tuple": (SECRET,)},
            "error": RuntimeError(f"bad {SECRET}"),
            "count": 7,
        },
    )
    assert event == {
        "event": f"calling https://api/{REDACTED}/x",
        "token": REDACTED,
        "nested": {"list": [f"Bearer {REDACTED}", 3, None, True], "tuple": [REDACTED]},
        "error": f"RuntimeError: bad {REDACTED}",
        "count": 7,
    }
    assert SECRET not in json.dumps(event)


def test_short_secrets_are_redacted_only_as_whole_values() -> None:
    redactor = SecretRedactor(["ab"])
    assert redactor(None, "info", {"k": "ab", "t": "a cab"}) == {"k": REDACTED, "t": "a cab"}


def test_later_secrets_are_added_and_objects_without_secrets_kept() -> None:
    redactor = SecretRedactor()
    marker = object()
    assert redactor(None, "info", {"o": marker})["o"] is marker
    redactor.update(["late-secret"])
    assert redactor.redact("x late-secret y") == f"x {REDACTED} y"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_installed_redaction_covers_structlog_tracebacks_and_stdlib(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("debug", json=True)
    install_redaction(SecretRedactor([SECRET]))
    log = structlog.get_logger()
    log.info("token is " + SECRET, header=f"Bearer {SECRET}")
    try:
        raise ValueError(SECRET)
    except ValueError:
        log.exception("failed")
    logging.getLogger("aiohttp.server").error("saw %s", SECRET)
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines()]
    assert SECRET not in err
    assert lines[0]["event"] == f"token is {REDACTED}"
    assert f"ValueError: {REDACTED}" in lines[1]["exception"]
    assert lines[2] == {**lines[2], "event": f"saw {REDACTED}", "logger": "aiohttp.server"}
