"""Structured logs: one JSON line per request (CONTRACT §5), built as a structlog chain.

The logger is made per app and passed in, so tests and embedders choose where lines go; nothing
configures structlog globally.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger


def _orjson_dumps(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _drop_none(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    return {k: v for k, v in event.items() if v is not None}


def make_logger(stream: TextIO | None = None) -> structlog.typing.FilteringBoundLogger:
    # bind() once: the lazy proxy wrap_logger returns would rebuild the logger on every call
    return structlog.wrap_logger(  # type: ignore[no-any-return]
        structlog.WriteLogger(stream or sys.stdout),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _drop_none,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
    ).bind()
