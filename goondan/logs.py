"""structlog set-up: readable lines on a TTY, JSON lines otherwise (journald, files).

Logs always go to stderr; stdout is reserved for what a command answers.
"""

from __future__ import annotations

import logging
import os
import sys
from contextvars import ContextVar

import structlog
from structlog.typing import EventDict, WrappedLogger

# Keys every log line of the running turn carries (instanceKey, traceId, turnId): one context
# variable set per turn, cheaper than structlog's one variable per key.
log_context: ContextVar[dict[str, str] | None] = ContextVar("goondan_log_context", default=None)


def _merge_log_context(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    context = log_context.get()
    if context:
        for key, value in context.items():
            event.setdefault(key, value)
    return event


def configure_logging(level: str | None = None, *, json: bool | None = None) -> None:
    level_name = (level or os.environ.get("GOONDAN_LOG_LEVEL") or "info").upper()
    numeric = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    if json is None:
        json = not sys.stderr.isatty()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            _merge_log_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
